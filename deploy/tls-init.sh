#!/bin/sh
# deploy/tls-init.sh (owned by deploy): the one-shot `tls-init` step of compose.yaml. It keeps a
# certificate the operator put in the TLS dir, or generates a self-signed one on first run; and it
# makes the redis password (once) that redis requires and the gateways use (`url`, owner-only: the
# gateway refuses a secret file that group or others may read).
#   PFORTE_TLS_DIR         where cert.pem and key.pem live         (default /etc/pforte/tls)
#   PFORTE_TLS_NAMES       comma-separated DNS names / IPs         (default localhost,127.0.0.1)
#   PFORTE_REDIS_DIR       where the redis secret files go         (default: none, skipped)
#   PFORTE_REDIS_PASSWORD  use this password instead of a generated one (first run only)
# Every failure says what failed and exits 1.
set -eu
dir=${PFORTE_TLS_DIR:-/etc/pforte/tls}
cert=$dir/cert.pem
key=$dir/key.pem

fail() {
  echo "tls-init: $*" >&2
  exit 1
}

redis_secret() {
  rdir=${PFORTE_REDIS_DIR:-}
  [ -n "$rdir" ] || return 0
  [ -d "$rdir" ] || fail "$rdir does not exist (mount the redis-secret volume there)"
  if [ -s "$rdir/password" ] && [ -s "$rdir/redis.conf" ] && [ -s "$rdir/url" ]; then
    # The gateway refuses a secret file that group or others may read (one left by an older
    # version is tightened here).
    chmod 0600 "$rdir/url" || fail "cannot make $rdir/url owner-only"
    echo "tls-init: using the redis password in $rdir"
    return 0
  fi
  [ -w "$rdir" ] || fail "$rdir is not writable by uid $(id -u): cannot store the redis password"
  pw=${PFORTE_REDIS_PASSWORD:-}
  if [ -z "$pw" ]; then
    pw=$(openssl rand -hex 32) || fail "openssl rand failed: cannot generate the redis password"
  fi
  case "$pw" in
    *[!A-Za-z0-9._~-]*) fail "PFORTE_REDIS_PASSWORD may hold only A-Z a-z 0-9 . _ ~ - (it goes into a URL)" ;;
  esac
  umask 022
  # Readable by the redis user (another uid); only redis and the gateways mount this volume.
  printf '%s\n' "$pw" > "$rdir/password.tmp" || fail "cannot write $rdir/password"
  printf 'requirepass %s\n' "$pw" > "$rdir/redis.conf.tmp" || fail "cannot write $rdir/redis.conf"
  printf 'redis://:%s@redis:6379/0\n' "$pw" > "$rdir/url.tmp" || fail "cannot write $rdir/url"
  mv "$rdir/password.tmp" "$rdir/password"
  mv "$rdir/redis.conf.tmp" "$rdir/redis.conf"
  # Only the gateway (this uid) reads the URL: owner-only, as the gateway requires of a secret.
  chmod 0600 "$rdir/url.tmp"
  mv "$rdir/url.tmp" "$rdir/url"
  echo "tls-init: stored a new redis password in $rdir"
}

redis_secret

if [ -s "$cert" ] && [ -s "$key" ]; then
  echo "tls-init: using the certificate in $dir"
  exit 0
fi
if [ -e "$cert" ] || [ -e "$key" ]; then
  fail "$dir holds only one of cert.pem and key.pem: supply both, or neither"
fi
[ -d "$dir" ] || fail "$dir does not exist (mount the TLS volume or PFORTE_TLS_SOURCE there)"
[ -w "$dir" ] || fail "$dir is not writable by uid $(id -u): make it writable, or put your own cert.pem and key.pem in it"

names=${PFORTE_TLS_NAMES:-localhost,127.0.0.1}
san=""
first=""
for n in $(echo "$names" | tr ',' ' '); do
  [ -n "$first" ] || first=$n
  case "$n" in
    *:*) san="$san,IP:$n" ;;                 # IPv6 literal
    *[!0-9.]*) san="$san,DNS:$n" ;;          # anything but digits and dots: a DNS name
    *) san="$san,IP:$n" ;;                   # IPv4 literal
  esac
done
[ -n "$san" ] || fail "PFORTE_TLS_NAMES is empty"

umask 077
if ! out=$(openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=$first" -addext "subjectAltName=${san#,}" \
  -keyout "$key.tmp" -out "$cert.tmp" 2>&1); then
  rm -f "$key.tmp" "$cert.tmp"
  fail "openssl could not generate the certificate for $names: $out"
fi
chmod 0644 "$cert.tmp"
mv "$key.tmp" "$key"
mv "$cert.tmp" "$cert"
echo "tls-init: generated a self-signed certificate for $names in $dir"
echo "tls-init: clients must trust $cert (or replace cert.pem and key.pem with your own)"
