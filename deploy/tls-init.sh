#!/bin/sh
# deploy/tls-init.sh (owned by deploy): the one-shot `tls-init` step of compose.yaml. It keeps a
# certificate the operator put in the TLS dir, or generates a self-signed one on first run.
#   PFORTE_TLS_DIR    where cert.pem and key.pem live      (default /etc/pforte/tls)
#   PFORTE_TLS_NAMES  comma-separated DNS names / IPs      (default localhost,127.0.0.1)
set -eu
dir=${PFORTE_TLS_DIR:-/etc/pforte/tls}
cert=$dir/cert.pem
key=$dir/key.pem

if [ -s "$cert" ] && [ -s "$key" ]; then
  echo "tls-init: using the certificate in $dir"
  exit 0
fi
if [ -e "$cert" ] || [ -e "$key" ]; then
  echo "tls-init: $dir holds only one of cert.pem and key.pem: supply both, or neither" >&2
  exit 1
fi

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
if [ -z "$san" ]; then
  echo "tls-init: PFORTE_TLS_NAMES is empty" >&2
  exit 1
fi

umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=$first" -addext "subjectAltName=${san#,}" \
  -keyout "$key.tmp" -out "$cert.tmp" 2>/dev/null
chmod 0644 "$cert.tmp"
mv "$key.tmp" "$key"
mv "$cert.tmp" "$cert"
echo "tls-init: generated a self-signed certificate for $names in $dir"
echo "tls-init: clients must trust $cert (or replace cert.pem and key.pem with your own)"
