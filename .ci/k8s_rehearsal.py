#!/usr/bin/env python3
# .ci/k8s_rehearsal.py (owned by deploy): boots deploy/kubernetes/'s workloads as processes on
# loopback, as .ci/compose_rehearsal.py does for compose, to prove the manifests' wiring.
"""Rehearse `kubectl apply -k deploy/kubernetes` without a cluster.

usage: sudo python3 .ci/k8s_rehearsal.py [--bin-dir target/debug] [--keep]

What is real: each container's command (the image's ENTRYPOINT + args, or its command), its
environment (values, `$(VAR)` expansion, fieldRef metadata.name, secretKeyRef), the ConfigMaps'
files (pforte.toml, the redis scripts), the Secrets as kubelet mounts them (0440, group
fsGroup), the pod's runAsUser/runAsGroup/fsGroup (setpriv), init containers before containers,
the StatefulSet's ordered start and the probes' commands and paths; the built `pforte` and
`mcp-service`, Debian's redis-server.

What stands in for the cluster: a private network namespace (nothing can leave it) whose
/etc/hosts names each pod (redis-N.redis.pforte.svc.cluster.local, mcp-service) on a loopback
address of its own, `0.0.0.0` in a pod's settings becoming that address; a volume is a scratch
directory, its mount path replaced in the pod's command, environment and files; the
LoadBalancer Service is a TCP forwarder on :443 over the gateways whose /readyz answers 200
(mcp.example.com, the ConfigMap's public_url, resolves to it). The ACME section is replaced by a
self-signed certificate (no CA here) and the OIDC issuer is unreachable (no route out).

Steps: redis-0..2 (each a redis and a sentinel) until the sentinels see two replicas →
mcp-service → three gateways (init container, then `pforte serve`) until /readyz → a static
token from `pforte token create` in gateway-0's environment → MCP initialize and a ping through
the Service, the session's calls spread over the gateways → the master's redis killed (SIGKILL):
the sentinels promote a replica, calls through the Service succeed again and the token still
works → the killed redis started again by its script rejoins as a replica of the new master.
Exit status: 0 every step passed, 1 a step failed, 2 cannot rehearse here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "deploy/kubernetes"
INSIDE = "PFORTE_K8S_REHEARSAL_INSIDE"
DOMAIN = "pforte.svc.cluster.local"
PUBLIC = "mcp.example.com"
# deploy/Dockerfile's ENTRYPOINTs, by image.
ENTRYPOINTS = {"pforte-gateway:local": ["pforte"], "pforte-mcp-service:local": ["mcp-service"]}


class Failed(Exception):
    pass


def say(msg: str) -> None:
    print(f"== {msg}", flush=True)


def until(what: str, cond, within: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise Failed(f"{what}: not within {within:.0f} s")


def objects() -> dict[tuple[str, str], dict]:
    kust = yaml.safe_load((DIR / "kustomization.yaml").read_text())
    out = {}
    for f in kust["resources"]:
        for o in yaml.safe_load_all((DIR / f).read_text()):
            if o:
                out[(o["kind"], o["metadata"]["name"])] = o
    return out


class Pod:
    """One pod: its IP, scratch volumes and processes."""

    def __init__(self, r: "Rehearsal", name: str, spec: dict, ip: str):
        self.r, self.name, self.spec, self.ip = r, name, spec, ip
        self.dir = r.scratch / "pods" / name
        self.dir.mkdir(parents=True)
        self.dir.chmod(0o755)
        sc = spec.get("securityContext", {})
        self.uid, self.gid = sc.get("runAsUser", 0), sc.get("runAsGroup", 0)
        self.fs_group = sc.get("fsGroup")
        self.volumes: dict[str, Path] = {}
        for v in spec.get("volumes", []):
            self.volumes[v["name"]] = self.volume(v)
        for claim in r.claims.get(name, []):
            self.volumes[claim] = self.owned(self.dir / "vol" / claim, 0o2770)
        # A ConfigMap's files name mount paths too (a script sourcing another, the config's
        # secret files): the pod's mounts, as its containers see them.
        pod_mounts = sorted({m for c in spec.get("containers", []) + spec.get("initContainers", [])
                             for m in self.mounts(c)}, key=lambda p: -len(p[0]))
        for v in spec.get("volumes", []):
            if "configMap" in v:
                for f in self.volumes[v["name"]].iterdir():
                    f.write_text(self.local(f.read_text(), pod_mounts))
        self.procs: dict[str, subprocess.Popen] = {}

    def owned(self, path: Path, mode: int) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, self.fs_group if self.fs_group is not None else 0)
        path.chmod(mode)
        return path

    def volume(self, v: dict) -> Path:
        path = self.dir / "vol" / v["name"]
        if "emptyDir" in v or "persistentVolumeClaim" in v:
            return self.owned(path, 0o2777 if self.fs_group is None else 0o2770)
        if "configMap" in v:
            data = self.r.objs[("ConfigMap", v["configMap"]["name"])]["data"]
            self.owned(path, 0o755)
            for key, text in data.items():
                (path / key).write_text(text)
                (path / key).chmod(0o644)
            return path
        if "secret" in v:
            self.owned(path, 0o755)
            for key, text in self.r.secrets[v["secret"]["secretName"]].items():
                f = path / key
                f.write_text(text)
                os.chown(f, 0, self.fs_group or 0)
                f.chmod(v["secret"].get("defaultMode", 0o644))
            return path
        raise Failed(f"{self.name}: volume kind of {v['name']} not rehearsed")

    def mounts(self, c: dict) -> list[tuple[str, str]]:
        """(mount path, scratch path), the longest first, so /a/b wins over /a."""
        m = [(vm["mountPath"], str(self.volumes[vm["name"]])) for vm in c.get("volumeMounts", [])]
        return sorted(m, key=lambda p: -len(p[0]))

    def local(self, text: str, mounts: list[tuple[str, str]]) -> str:
        """`text` with each mount path (at the start of a path) replaced in one pass."""
        if mounts:
            paths = dict(reversed(mounts))  # the first of a path wins
            alt = "|".join(re.escape(m) for m in sorted(paths, key=len, reverse=True))
            text = re.sub(rf"(?<![\w.-])({alt})(?=/|$|[^\w.-])",
                          lambda m: paths[m.group(1)], text)
        return text.replace("0.0.0.0", self.ip)

    def env(self, c: dict, mounts) -> dict[str, str]:
        env = {"PATH": f"{self.r.image_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/nonexistent"}
        for e in c.get("env", []):
            if "value" in e:
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
            elif "fieldRef" in e.get("valueFrom", {}):
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                value = {"metadata.name": self.name, "status.podIP": self.ip}[field]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                value = self.r.secrets[ref["name"]][ref["key"]]
            env[e["name"]] = self.local(value, mounts)
        return env

    def argv(self, c: dict, mounts) -> list[str]:
        argv = c.get("command") or ENTRYPOINTS[c["image"]]
        argv = [*argv, *c.get("args", [])]
        return [self.local(a, mounts) for a in argv]

    def wrap(self, argv: list[str]) -> list[str]:
        groups = ",".join(str(g) for g in {self.gid, self.fs_group} if g is not None)
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", f"--groups={groups}",
                "--inh-caps=-all", "--no-new-privs", *argv]

    def container(self, c: dict) -> dict:
        mounts = self.mounts(c)
        return {"argv": self.wrap(self.argv(c, mounts)), "env": self.env(c, mounts)}

    def run_init(self) -> None:
        for c in self.spec.get("initContainers", []):
            run = self.container(c)
            out = subprocess.run(run["argv"], env=run["env"], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode != 0:
                raise Failed(f"{self.name}: init container {c['name']}: {out.stderr}")

    def start(self, name: str | None = None) -> None:
        for c in self.spec["containers"]:
            if name and c["name"] != name:
                continue
            run = self.container(c)
            log = open(self.r.logs / f"{self.name}-{c['name']}.log", "ab")
            self.procs[c["name"]] = subprocess.Popen(run["argv"], env=run["env"], stdout=log,
                                                     stderr=subprocess.STDOUT,
                                                     stdin=subprocess.DEVNULL)

    def probe(self, c: dict, kind: str) -> bool:
        p = c[kind]
        if "exec" in p:
            run = self.container({**c, "command": p["exec"]["command"], "args": []})
            return subprocess.run(run["argv"], env=run["env"], capture_output=True,
                                  timeout=p.get("timeoutSeconds", 1)).returncode == 0
        get = p["httpGet"]
        port = next(x["containerPort"] for x in c["ports"]
                    if x.get("name") == get["port"] or x["containerPort"] == get["port"])
        scheme = get.get("scheme", "HTTP").lower()
        return http_status(f"{scheme}://{self.ip}:{port}{get['path']}") == 200

    def ready(self) -> bool:
        return all(self.probe(c, "readinessProbe") for c in self.spec["containers"])

    def live(self) -> bool:
        return all(self.probe(c, "livenessProbe") for c in self.spec["containers"])

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.kill()
        p.wait()

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def http_status(url: str, body: bytes | None = None, headers: dict | None = None) -> int:
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=insecure()) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return 0


class Balancer:
    """The LoadBalancer Service: TCP on :443, round robin over ready endpoints."""

    def __init__(self, endpoints):
        self.endpoints = endpoints  # () -> list of (ip, port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 443))
        self.sock.listen(64)
        self.n = 0
        self.served: dict[str, int] = {}
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            client, _ = self.sock.accept()
            eps = self.endpoints()
            if not eps:
                client.close()
                continue
            ip, port = eps[self.n % len(eps)]
            self.n += 1
            self.served[ip] = self.served.get(ip, 0) + 1
            try:
                upstream = socket.create_connection((ip, port), timeout=5)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Rehearsal:
    def __init__(self, bin_dir: Path, scratch: Path):
        self.scratch = scratch
        self.objs = objects()
        self.logs = scratch / "logs"
        self.logs.mkdir()
        self.image_dir = scratch / "image"
        self.image_dir.mkdir()
        for b in ("pforte", "mcp-service"):
            shutil.copy2(bin_dir / b, self.image_dir / b)
        self.image_dir.chmod(0o755)
        self.secrets = self.make_secrets()
        self.claims: dict[str, list[str]] = {}
        self.pods: dict[str, Pod] = {}

    def make_secrets(self) -> dict[str, dict[str, str]]:
        """The secretGenerator's Secrets, from fresh values (secrets/README.md's recipes)."""
        import base64
        key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        return {
            "pforte-gateway-secrets": {"vault_key": f"k1:{key}\n",
                                       "oidc_client_secret": secrets.token_hex(16) + "\n"},
            "pforte-redis": {"password": secrets.token_hex(24) + "\n"},
        }

    def hosts(self) -> None:
        lines = ["127.0.0.1 localhost", f"127.0.0.1 {PUBLIC}", "127.0.30.1 mcp-service"]
        lines += [f"127.0.10.{i + 1} redis-{i}.redis.{DOMAIN}" for i in range(3)]
        hosts = self.scratch / "hosts"
        hosts.write_text("\n".join(lines) + "\n")
        hosts.chmod(0o644)
        subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)

    def tls_instead_of_acme(self) -> None:
        """No CA on loopback: the ConfigMap's [tls.acme] becomes a self-signed [tls]."""
        cm = self.objs[("ConfigMap", "pforte-config")]
        toml = cm["data"]["pforte.toml"]
        tls = self.scratch / "tls"
        tls.mkdir()
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj",
                        f"/CN={PUBLIC}", "-addext", f"subjectAltName=DNS:{PUBLIC}",
                        "-keyout", str(tls / "key.pem"), "-out", str(tls / "cert.pem")],
                       check=True, capture_output=True)
        for f in tls.iterdir():
            os.chown(f, 10001, 10001)
            f.chmod(0o600)
        os.chown(tls, 10001, 10001)
        new, n = re.subn(r"\[tls\.acme\]\n(?:[^\[\n].*\n|\n)*",
                         f'[tls]\ncert = "{tls}/cert.pem"\nkey = "{tls}/key.pem"\n\n', toml)
        if n != 1:
            raise Failed("pforte.toml: no [tls.acme] section to stand in for")
        cm["data"]["pforte.toml"] = new

    def pod(self, workload: tuple[str, str], name: str, ip: str) -> Pod:
        obj = self.objs[workload]
        if obj["kind"] == "StatefulSet":
            self.claims[name] = [t["metadata"]["name"] for t in obj["spec"]["volumeClaimTemplates"]]
        p = Pod(self, name, obj["spec"]["template"]["spec"], ip)
        self.pods[name] = p
        return p

    def stop(self) -> None:
        for p in self.pods.values():
            p.stop()


def redis_cli(r: Rehearsal, host: str, port: int, *args: str) -> list[str]:
    env = dict(os.environ, REDISCLI_AUTH=r.secrets["pforte-redis"]["password"].strip())
    out = subprocess.run(["redis-cli", "-h", host, "-p", str(port), *args], env=env,
                         capture_output=True, text=True, timeout=5)
    return out.stdout.splitlines()


def sentinel_field(r: Rehearsal, i: int, field: str) -> str | None:
    lines = redis_cli(r, f"127.0.10.{i + 1}", 26379, "SENTINEL", "master", "pforte")
    pairs = dict(zip(lines[::2], lines[1::2]))
    return pairs.get(field)


def mcp(url: str, token: str, body: dict, session: str | None = None) -> tuple[int, str | None]:
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
               "accept": "application/json, text/event-stream"}
    if session:
        headers["mcp-session-id"] = session
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5, context=insecure()) as resp:
            resp.read()
            return resp.status, resp.headers.get("mcp-session-id")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError):
        return 0, None


def rehearse(r: Rehearsal) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    r.hosts()
    r.tls_instead_of_acme()
    sts = ("StatefulSet", "redis")
    replicas = r.objs[sts]["spec"]["replicas"]
    for i in range(replicas):
        pod = r.pod(sts, f"redis-{i}", f"127.0.10.{i + 1}")
        pod.start()
        until(f"redis-{i} ready (its probes)", pod.ready)
        say(f"redis-{i} ready (redis and sentinel)")
    until("the sentinels see each other and two replicas",
          lambda: all(sentinel_field(r, i, "num-other-sentinels") == "2"
                      and sentinel_field(r, i, "num-slaves") == "2" for i in range(3)), 60)
    say("the sentinels see each other and two replicas; redis-0 is the master")

    svc = r.pod(("Deployment", "mcp-service"), "mcp-service-0", "127.0.30.1")
    svc.start()
    until("mcp-service ready (/readyz)", svc.ready)
    until("mcp-service live (/healthz)", svc.live)
    say("mcp-service ready")

    gw_obj = ("Deployment", "pforte-gateway")
    gateways = []
    for i in range(r.objs[gw_obj]["spec"]["replicas"]):
        pod = r.pod(gw_obj, f"pforte-gateway-{i}", f"127.0.20.{i + 1}")
        pod.run_init()
        secret_dir = pod.volumes["secrets"]
        modes = {f.name: f.stat().st_mode & 0o777 for f in secret_dir.iterdir()}
        if len(modes) != 3 or any(m & 0o077 for m in modes.values()):
            raise Failed(f"the init container's secret files are not owner-only: {modes}")
        pod.start()
        gateways.append(pod)
    for pod in gateways:
        until(f"{pod.name} ready (/readyz)", pod.ready, 60)
        until(f"{pod.name} live (/healthz)", pod.live)
    say("three gateways ready on the sentinel URL the init container wrote")

    balancer = Balancer(lambda: [(p.ip, 8443) for p in gateways if p.procs])
    public = f"https://{PUBLIC}/mcp"
    g0 = gateways[0]
    admin = g0.container({**next(c for c in g0.spec["containers"] if c["name"] == "gateway"),
                          "args": ["token", "create", "rehearsal", "--config",
                                   "/etc/pforte/pforte.toml"]})
    out = subprocess.run(admin["argv"], env=admin["env"], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        raise Failed(f"pforte token create: {out.stderr}")
    token = out.stdout.strip()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "k8s-rehearsal", "version": "1"}}}
    status, session = until("initialize through the Service",
                            lambda: (lambda s: s if s[0] == 200 else None)(mcp(public, token, init)))
    mcp(public, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    before = dict(balancer.served)
    codes = [mcp(public, token, ping, session)[0] for _ in range(9)]
    if codes != [200] * 9:
        raise Failed(f"pings in the session through the Service: {codes}")
    spread = {ip: n - before.get(ip, 0) for ip, n in balancer.served.items()}
    if sum(1 for n in spread.values() if n > 0) != 3:
        raise Failed(f"the Service did not spread the session over three gateways: {spread}")
    say(f"a static token and an MCP session through the Service: 9 pings over 3 gateways {spread}")

    master = r.pods["redis-0"]
    master.kill("redis")
    killed = time.monotonic()
    say("redis-0's redis killed (SIGKILL)")
    new = until("the sentinels promote a replica",
                lambda: (lambda ip: ip if ip and ip != f"redis-0.redis.{DOMAIN}" else None)(
                    (redis_cli(r, "127.0.10.2", 26379, "SENTINEL", "get-master-addr-by-name",
                               "pforte") or [None])[0]), 60)
    until("calls through the Service succeed again",
          lambda: all(mcp(public, token, ping, session)[0] == 200 for _ in range(6)), 60)
    say(f"{new} promoted; calls succeed again {time.monotonic() - killed:.1f} s after the kill")
    master.start("redis")
    until("redis-0 rejoins as a replica of the new master",
          lambda: "role:slave" in "\n".join(redis_cli(r, "127.0.10.1", 6379, "INFO",
                                                      "replication"))
          and f"master_host:{new}" in "\n".join(redis_cli(r, "127.0.10.1", 6379, "INFO",
                                                           "replication")), 60)
    say(f"redis-0 started again by its script: a replica of {new}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", default=str(ROOT / "target/debug"))
    p.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, volumes)")
    args = p.parse_args()
    bin_dir = Path(args.bin_dir).resolve()
    if os.environ.get(INSIDE):
        r = Rehearsal(bin_dir, Path(os.environ[INSIDE]))
        try:
            rehearse(r)
        except (Failed, subprocess.SubprocessError, OSError, KeyError) as e:
            print(f"kubernetes rehearsal failed: {e}", file=sys.stderr)
            print(f"   logs: {r.logs}", file=sys.stderr)
            return 1
        finally:
            r.stop()
        return 0
    missing = [t for t in ("unshare", "setpriv", "ip", "mount", "redis-server", "redis-cli",
                           "openssl") if not shutil.which(t)]
    missing += [str(bin_dir / b) for b in ("pforte", "mcp-service") if not (bin_dir / b).exists()]
    if os.geteuid() != 0 or missing:
        why = "needs root (namespaces, mounts)" if os.geteuid() != 0 else f"missing {missing}"
        print(f"kubernetes rehearsal skipped: {why}", file=sys.stderr)
        return 2
    # Not under /tmp: /tmp is a mount path of the pods, replaced in their settings.
    scratch = Path(tempfile.mkdtemp(prefix="pforte-k8s-", dir="/var/tmp"))
    scratch.chmod(0o755)
    env = dict(os.environ, **{INSIDE: str(scratch)})
    rc = subprocess.call(["unshare", "--mount", "--net", "--fork", "--propagation", "private",
                          sys.executable, __file__, "--bin-dir", str(bin_dir)], env=env)
    if args.keep or rc != 0:
        print(f"   scratch kept: {scratch}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
