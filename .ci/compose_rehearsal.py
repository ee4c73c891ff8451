#!/usr/bin/env python3
# .ci/compose_rehearsal.py (owned by deploy): boots compose.yaml's services as plain processes, the
# way `docker compose up` would start them, for machines without a Docker engine.
"""Rehearse `docker compose up` and docs/deploy.md's first steps without a Docker engine.

usage: sudo python3 .ci/compose_rehearsal.py [--bin-dir target/release] [--keep]

What is real: the commands, entrypoints, environment and healthchecks read from compose.yaml (with
`${VAR:-default}` defaults), the files from deploy/ (pforte.toml, tls-init.sh), the built `pforte`
and `mcp-service` binaries, Debian's redis-server, the image's unprivileged users (uid 10001 for
Pforte's images, 999 for redis) and the volume ownership deploy/Dockerfile gives them.

What stands in for the engine: one private network namespace (its own loopback, so the fixed
ports 8443, 8080 and 6379 are free and nothing leaves it) and one private mount namespace in which
each named volume is a fresh directory mounted at its container path and /etc/hosts resolves the
service names. All services share that namespace: the network separation compose.yaml declares
(mcp-service cannot reach redis) is checked by .ci/check_compose.py, not here.

The run: tls-init → redis (until healthy) → mcp-service → `gateway check` → gateway (until its
healthcheck passes) → docs/deploy.md's `pforte token create` and `pforte user add alice` inside
the gateway's environment → `whoami` with the token (subject operator, client laptop) → the whole
OAuth flow of a Claude.ai-style client for alice, and `whoami` with its token → every service
stopped and started again on the same volumes (tls-init keeps its certificate and password; the
token and the OAuth client still work).
Exit status: 0 every step passed, 1 a step failed (it says which), 2 cannot rehearse here.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.cookiejar
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSIDE = "PFORTE_REHEARSAL_INSIDE"
PFORTE_UID = 10001
REDIS_UID = 999
# deploy/Dockerfile: the directories each image creates, so a fresh named volume mounted there
# starts with this owner and mode.
IMAGE_DIRS = {
    "/var/lib/pforte": (PFORTE_UID, 0o700),
    "/etc/pforte/tls": (PFORTE_UID, 0o750),
    "/etc/pforte/redis": (PFORTE_UID, 0o755),
    "/var/lib/mcp-service": (PFORTE_UID, 0o700),
    "/data": (REDIS_UID, 0o755),
}
# What each image's entrypoint / first command word is on this machine.
VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


class Failed(Exception):
    pass


def say(msg: str) -> None:
    print(f"== {msg}", flush=True)


def expand(value, env: dict[str, str]):
    if isinstance(value, str):
        return VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value).replace("$$", "$")
    if isinstance(value, list):
        return [expand(v, env) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, env) for k, v in value.items()}
    return value


def load_compose() -> dict:
    import yaml  # PyYAML; Debian's python3-yaml or pip

    with open(ROOT / "compose.yaml") as f:
        return expand(yaml.safe_load(f), dict(os.environ))


def dockerfile_env(target: str) -> dict[str, str]:
    """The `ENV` lines of one stage of deploy/Dockerfile (and its `WORKDIR`, as `WORKDIR`)."""
    env: dict[str, str] = {}
    stage = None
    text = (ROOT / "deploy/Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "FROM" and words[2] == "AS":
            stage = words[3]
        elif words and words[0] == "ENV" and stage == target:
            for pair in words[1:]:
                k, _, v = pair.partition("=")
                env[k] = v
        elif len(words) == 2 and words[0] == "WORKDIR" and stage == target:
            env["WORKDIR"] = words[1]
    return env


class Rehearsal:
    def __init__(self, compose: dict, bin_dir: Path, scratch: Path):
        self.compose = compose
        # The images' files, where their users can reach them whatever the clone's permissions.
        self.bin_dir = scratch / "image"
        self.bin_dir.mkdir(exist_ok=True)
        for name in ("pforte", "mcp-service"):
            shutil.copy2(bin_dir / name, self.bin_dir / name)
        shutil.copy2(ROOT / "deploy/tls-init.sh", self.bin_dir / "pforte-tls-init")
        self.scratch = scratch
        self.services = compose["services"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.created_dirs: list[Path] = []
        self.logs = scratch / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    # ---- the engine's part: volumes, hosts, users ----
    def mount_volumes(self) -> None:
        mounts: dict[str, str] = {}
        for svc in self.services.values():
            for vol in svc.get("volumes", []):
                src, target = vol.split(":")[:2]
                if "/" in src:
                    raise Failed(f"bind mount {src} is not rehearsed")
                if mounts.get(target, src) != src:
                    raise Failed(f"{target} holds two volumes")
                mounts[target] = src
        for target, name in sorted(mounts.items()):
            host = self.scratch / "volumes" / name
            if not host.exists():
                host.mkdir(parents=True)
                uid, mode = IMAGE_DIRS.get(target, (0, 0o755))
                os.chown(host, uid, uid)
                host.chmod(mode)
            self.bind(host, Path(target))
        for svc in self.services.values():
            for cfg in svc.get("configs", []):
                source = self.compose["configs"][cfg["source"]]["file"]
                self.bind((ROOT / source).resolve(), Path(cfg["target"]))
        hosts = self.scratch / "hosts"
        hosts.write_text("127.0.0.1 localhost " + " ".join(self.services) + "\n::1 localhost\n")
        self.bind(hosts, Path("/etc/hosts"))

    def bind(self, source: Path, target: Path) -> None:
        if not target.exists():
            missing = [p for p in [target, *target.parents] if not p.exists()]
            if source.is_dir():
                target.mkdir(parents=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            self.created_dirs.extend(missing)
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)

    def unmount_all(self) -> None:
        # The mount namespace ends with this process; what was created on the host goes.
        for p in self.created_dirs:
            subprocess.run(["umount", "-l", str(p)], stderr=subprocess.DEVNULL)
        for p in sorted(set(self.created_dirs), key=lambda p: -len(p.parts)):
            try:
                p.unlink() if p.is_file() else p.rmdir()
            except OSError:
                pass

    # ---- services ----
    def argv(self, name: str) -> tuple[list[str], dict[str, str], int]:
        svc = self.services[name]
        image = svc.get("image", "")
        command = svc.get("command", [])
        if isinstance(command, str):
            command = shlex.split(command)
        if image.startswith("redis:"):
            # The official image: WORKDIR /data, where the AOF goes.
            argv = [shutil.which("redis-server") or "redis-server", *command[1:]]
            return argv, {"WORKDIR": "/data"}, REDIS_UID
        target = svc.get("build", {}).get("target", "gateway")
        env = dockerfile_env(target)
        entry = svc.get("entrypoint")
        if entry == ["/usr/local/bin/pforte-tls-init"]:
            argv = ["sh", str(self.bin_dir / "pforte-tls-init")]
        elif target == "gateway":
            argv = [str(self.bin_dir / "pforte"), *command]
        else:
            argv = [str(self.bin_dir / "mcp-service"), *command]
        return argv, env, PFORTE_UID

    def env(self, name: str, image_env: dict[str, str]) -> dict[str, str]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
        env.update({k: v for k, v in image_env.items() if k != "WORKDIR"})
        env.update({k: str(v) for k, v in self.services[name].get("environment", {}).items()})
        return env

    def start(self, name: str) -> subprocess.Popen:
        argv, image_env, uid = self.argv(name)
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
            env=self.env(name, image_env),
            cwd=image_env.get("WORKDIR", "/"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs[name] = proc
        return proc

    def exec_in(self, name: str, args: list[str], stdin: str | None = None) -> str:
        """`docker compose exec NAME …`: the service's image env and user, its binary."""
        argv, image_env, uid = self.argv(name)
        out = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", argv[0], *args],
            env=self.env(name, image_env),
            cwd=image_env.get("WORKDIR", "/"),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise Failed(f"{name} {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def healthcheck(self, name: str) -> bool:
        hc = self.services[name]["healthcheck"]["test"]
        argv, image_env, uid = self.argv(name)
        env = self.env(name, image_env)
        if hc[0] == "CMD-SHELL":
            cmd = ["sh", "-c", hc[1]]
        else:
            cmd = hc[1:]
        run = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd],
            env=env,
            capture_output=True,
            timeout=10,
        )
        return run.returncode == 0

    def wait_healthy(self, name: str, within: float = 60) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise Failed(f"{name} exited {proc.returncode}: {self.tail(name)}")
            if self.healthcheck(name):
                return
            time.sleep(0.2)
        raise Failed(f"{name} not healthy within {within:.0f} s: {self.tail(name)}")

    def tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]

    def run_once(self, name: str) -> str:
        proc = self.start(name)
        if proc.wait(timeout=60) != 0:
            raise Failed(f"{name} exited {proc.returncode}: {self.tail(name)}")
        return self.tail(name)

    def stop_all(self) -> None:
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise Failed(f"{name} did not stop within 20 s of SIGTERM")
        self.procs.clear()

    def check_before_init(self) -> None:
        """`docker compose run --rm --no-deps gateway check` on a first run, before tls-init made
        the certificate and the redis password: it passes, or says in one line what is missing."""
        argv, image_env, uid = self.argv("gateway")
        out = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", argv[0],
             "check", "--config", "/etc/pforte/pforte.toml"],
            env=self.env("gateway", image_env), cwd=image_env.get("WORKDIR", "/"),
            capture_output=True, text=True, timeout=60,
        )
        said = out.stderr.strip()
        if out.returncode == 0:
            print("   passes")
        elif len(said.splitlines()) == 1 and "panicked" not in said:
            print(f"   exit {out.returncode}: {said}")
        else:
            raise Failed(f"check before tls-init: exit {out.returncode}, said {said!r}")

    def up(self) -> None:
        """`docker compose up`, in depends_on order (the file's order satisfies it)."""
        say("tls-init")
        print("   " + self.run_once("tls-init").strip().replace("\n", "\n   "))
        say("redis (until healthy)")
        self.start("redis")
        self.wait_healthy("redis")
        say("mcp-service")
        self.start("mcp-service")
        say("gateway check (as `docker compose run --rm gateway check`)")
        self.exec_in("gateway", ["check", "--config", "/etc/pforte/pforte.toml"])
        say("gateway (until its healthcheck passes)")
        self.start("gateway")
        self.wait_healthy("gateway")


# ---- a client's part: HTTPS to the published port, forms as a browser submits them ----
class Forms(HTMLParser):
    def __init__(self):
        super().__init__()
        self.action = None
        self.fields: list[tuple[str, str]] = []
        self.buttons: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action", "")
        elif tag == "input" and a.get("name"):
            self.fields.append((a["name"], a.get("value") or ""))
        elif tag == "button" and a.get("name") and a.get("type", "submit") == "submit":
            self.buttons.append((a["name"], a.get("value") or ""))


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def lower(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


class Client:
    def __init__(self, cafile: Path):
        ctx = ssl.create_default_context(cafile=str(cafile))
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=ctx),
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
            NoRedirect,
        )

    def request(self, method, url, body=None, headers=None):
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, lower(resp.headers), resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, lower(e.headers), e.read().decode()

    def form(self, url, fields):
        body = urllib.parse.urlencode(fields).encode()
        return self.request("POST", url, body, {"content-type": "application/x-www-form-urlencoded"})


def whoami(client: Client, url: str, token: str) -> str:
    """docs/deploy.md's end-to-end check: initialize, then the `whoami` tool; returns its text."""
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
               "accept": "application/json, text/event-stream"}
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "compose-rehearsal", "version": "1"}},
    }).encode()
    status, got, text = client.request("POST", url, body, headers)
    session = got.get("mcp-session-id")
    if status != 200 or not session:
        raise Failed(f"initialize: {status} {text[:300]}")
    headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    client.request("POST", url, json.dumps(note).encode(), headers)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}}}
    status, _, text = client.request("POST", url, json.dumps(call).encode(), headers | {"mcp-name": "whoami"})
    if status != 200:
        raise Failed(f"whoami: {status} {text[:300]}")
    return text


def mcp_initialize(client: Client, url: str, token: str, within: float = 3.0) -> None:
    """An MCP initialize with `token`; a token made a moment ago reaches the gateway within its
    refresh interval (0.1 s), so a 401 is retried for `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        status, text = _initialize(client, url, token)
        if status == 200 and "serverInfo" in text:
            return
        if status != 401 or time.monotonic() > deadline:
            raise Failed(f"initialize with the token: {status} {text[:300]}")
        time.sleep(0.1)


def _initialize(client: Client, url: str, token: str) -> tuple[int, str]:
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "compose-rehearsal", "version": "1"}},
    }).encode()
    status, _, text = client.request("POST", url, body, {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    })
    return status, text


def oauth_flow(client: Client, public: str, user: str, password: str) -> tuple[str, dict]:
    """A Claude.ai-style client: discovery, DCR, PKCE, login, consent, code → token."""
    status, headers, _ = client.request("POST", f"{public}/mcp", b"{}", {"content-type": "application/json"})
    challenge = headers.get("www-authenticate", "")
    m = re.search(r'resource_metadata="([^"]+)"', challenge)
    if status != 401 or not m:
        raise Failed(f"unauthenticated /mcp: {status} {challenge!r}")
    prm = json.loads(client.request("GET", m.group(1))[2])
    issuer = prm["authorization_servers"][0]
    meta = json.loads(client.request("GET", f"{issuer}/.well-known/oauth-authorization-server")[2])
    callback = "https://claude.ai/api/mcp/auth_callback"
    status, _, text = client.request("POST", meta["registration_endpoint"], json.dumps({
        "client_name": "Claude", "redirect_uris": [callback],
        "token_endpoint_auth_method": "client_secret_post",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
    }).encode(), {"content-type": "application/json"})
    if status != 201:
        raise Failed(f"registration: {status} {text[:300]}")
    reg = json.loads(text)
    verifier = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    auth = meta["authorization_endpoint"] + "?" + urllib.parse.urlencode({
        "response_type": "code", "client_id": reg["client_id"], "redirect_uri": callback,
        "state": "rehearsal", "code_challenge": challenge, "code_challenge_method": "S256",
        "resource": prm["resource"],
    })
    status, _, page = client.request("GET", auth)
    page_url = auth
    if status == 200 and 'type="password"' in page:
        login = Forms()
        login.feed(page)
        fields = [(k, {"username": user, "password": password}.get(k, v)) for k, v in login.fields]
        status, headers, text = client.form(urllib.parse.urljoin(page_url, login.action), fields)
        if status != 303:
            raise Failed(f"login as {user}: {status} {text[:300]}")
        page_url = urllib.parse.urljoin(page_url, headers["location"])
        status, _, page = client.request("GET", page_url)
    if status != 200:
        raise Failed(f"consent page: {status} {page[:300]}")
    consent = Forms()
    consent.feed(page)
    approve = [b for b in consent.buttons if b[1] == "approve"]
    if not approve:
        raise Failed(f"no approve button: {page[:300]}")
    status, headers, text = client.form(urllib.parse.urljoin(page_url, consent.action), consent.fields + approve)
    if status != 303:
        raise Failed(f"consent: {status} {text[:300]}")
    code = urllib.parse.parse_qs(urllib.parse.urlparse(headers["location"]).query).get("code", [""])[0]
    status, _, text = client.form(meta["token_endpoint"], [
        ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", callback),
        ("code_verifier", verifier), ("client_id", reg["client_id"]),
        ("client_secret", reg.get("client_secret", "")), ("resource", prm["resource"]),
    ])
    if status != 200:
        raise Failed(f"token endpoint: {status} {text[:300]}")
    return json.loads(text)["access_token"], reg


def rehearse(bin_dir: Path, scratch: Path) -> None:
    compose = load_compose()
    r = Rehearsal(compose, bin_dir, scratch)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    try:
        r.mount_volumes()
        say("gateway check on a first run, before tls-init (`run --no-deps`)")
        r.check_before_init()
        r.up()
        public = r.services["gateway"]["environment"]["PFORTE_PUBLIC_URL"]
        client = Client(Path("/etc/pforte/tls/cert.pem"))

        say("docs/deploy.md: pforte token create laptop")
        out = r.exec_in("gateway", ["token", "create", "laptop"])
        token = next((w for w in out.split() if w.startswith("pft_")), None)
        if not token:
            raise Failed(f"token create printed no token: {out!r}")
        mcp_initialize(client, f"{public}/mcp", token)
        said = whoami(client, f"{public}/mcp", token)
        if "operator" not in said or "laptop" not in said:
            raise Failed(f"whoami with the laptop token: {said[:400]}")
        say("docs/deploy.md: pforte user add alice (password on stdin)")
        password = "rehearsal-" + base64.b16encode(os.urandom(8)).decode()
        r.exec_in("gateway", ["user", "add", "alice"], stdin=password + "\n")
        say("OAuth: discovery, registration, login as alice, consent, token")
        access, _ = oauth_flow(client, public, "alice", password)
        mcp_initialize(client, f"{public}/mcp", access)
        if "alice" not in whoami(client, f"{public}/mcp", access):
            raise Failed("whoami with alice's OAuth token does not name alice")

        say("restart: every service stopped and started on the same volumes")
        r.stop_all()
        r.up()
        mcp_initialize(client, f"{public}/mcp", token)
        mcp_initialize(client, f"{public}/mcp", access)
        listed = r.exec_in("gateway", ["token", "list"])
        if "laptop" not in listed:
            raise Failed(f"token list after restart: {listed}")
        say("every step passed")
    finally:
        try:
            r.stop_all()
        finally:
            r.unmount_all()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", default=str(ROOT / "target/release"))
    p.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, volumes)")
    args = p.parse_args()
    bin_dir = Path(args.bin_dir).resolve()
    if os.environ.get(INSIDE):
        scratch = Path(os.environ[INSIDE])
        try:
            rehearse(bin_dir, scratch)
        except (Failed, subprocess.SubprocessError, OSError, KeyError) as e:
            print(f"compose rehearsal failed: {e}", file=sys.stderr)
            print(f"   logs: {scratch / 'logs'}", file=sys.stderr)
            return 1
        return 0
    missing = [t for t in ("unshare", "setpriv", "redis-server", "redis-cli", "curl", "openssl")
               if not shutil.which(t)]
    missing += [str(bin_dir / b) for b in ("pforte", "mcp-service") if not (bin_dir / b).exists()]
    if os.geteuid() != 0 or missing:
        why = "needs root (namespaces, mounts)" if os.geteuid() != 0 else f"missing {', '.join(missing)}"
        print(f"compose rehearsal skipped: {why}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="pforte-compose-"))
    scratch.chmod(0o755)
    env = dict(os.environ, **{INSIDE: str(scratch)})
    rc = subprocess.call(["unshare", "--mount", "--net", "--fork", sys.executable, __file__,
                          "--bin-dir", str(bin_dir)], env=env)
    if args.keep or rc != 0:
        print(f"   scratch kept: {scratch}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
