#!/usr/bin/env python3
# .ci/check_compose.py (owned by deploy): client-side validation of compose.yaml (no Docker engine
# needed) — the compose-spec JSON schema via check-jsonschema, then Pforte's own rules.
"""Validate a compose file the way CI needs it, without a Docker engine.

usage: python3 .ci/check_compose.py compose.yaml [OVERRIDE.yaml ...] [--public SERVICE]

1. Schema: `check-jsonschema --builtin-schema vendor.compose-spec` on every file (installed with
   pip when missing).
2. Semantics, on the files merged as `docker compose -f A -f B` would (variables take their
   `${VAR:-default}` defaults, so the result does not depend on the caller's environment):
   - every depends_on / network / named volume / config names something that exists;
   - only the public service (`gateway`; `--public` changes it) publishes ports;
   - mcp-service sits only on internal networks and shares one with the gateway, and accepts
     the Host the gateway forwards (MCP_SERVICE_ALLOWED_HOSTS);
   - every build context, Dockerfile, build target and bind-mounted file exists;
   - redis has a healthcheck, a named volume at /data and AOF persistence;
   - redis requires a password (`--requirepass`, or a config file with `requirepass` that the
     init step writes into a volume) and sits only on networks no service but the gateway (and
     the scaling variant's gateways) joins: mcp-service parses untrusted text and must not reach it;
   - mcp-service keeps its documents on a named volume mounted at MCP_SERVICE_DATA_DIR;
   - the gateway has a healthcheck on /readyz.

   - with MCP_SERVICE_STORE=redis (replicas), mcp-service's documents are in a redis of its own:
     not the gateway's, AOF on a named volume at /data, on internal networks only it joins;
   - upstream hosts may be replica container names `<project>-<service>-<n>` (`--scale`).

Given only compose.yaml, it also checks the scaling variants when those overrides exist:
compose.yaml + deploy/compose.scale.yaml (public service `lb`) and compose.yaml +
deploy/compose.replicas.yaml (two mcp-service replicas), and compose.yaml +
deploy/compose.caddy.yaml (Caddy's automatic HTTPS in front, public service `caddy`), and
compose.yaml + deploy/compose.team.yaml (SSO, the first admin, the vault: every PFORTE_*_FILE and
client_secret_file under /run/secrets names a secret the gateway mounts; the secret files live in
the operator's ./secrets/, outside the repository).
Exit status: 0 valid, 1 a rule failed (each failure is printed), 2 usage or tooling error.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

SCALE_OVERRIDE = "deploy/compose.scale.yaml"
SCALE_PUBLIC = "lb"
REPLICAS_OVERRIDE = "deploy/compose.replicas.yaml"
CADDY_OVERRIDE = "deploy/compose.caddy.yaml"
CADDY_PUBLIC = "caddy"
TEAM_OVERRIDE = "deploy/compose.team.yaml"
# Where an operator keeps the team's secret files (deploy/compose.team.yaml): not in the
# repository, so a missing file there is the operator's step, not an error.
SECRETS_DIR = "./secrets/"
MCP_SERVICE = "mcp-service"
GATEWAY = "gateway"
REDIS = "redis"


def fail_tooling(msg: str) -> NoReturn:
    print(f"check_compose: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- schema (check-jsonschema)


def check_jsonschema_cmd() -> list[str]:
    """The check-jsonschema command, installing the package with pip if it is missing."""
    if importlib.util.find_spec("check_jsonschema") is None:
        print("check_compose: installing check-jsonschema (pip)", file=sys.stderr)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "check-jsonschema"]
        if subprocess.run(pip).returncode != 0:
            # Debian-style "externally managed" Pythons need the flag.
            if subprocess.run(pip + ["--break-system-packages"]).returncode != 0:
                fail_tooling("cannot install check-jsonschema with pip")
        importlib.invalidate_caches()
    exe = shutil.which("check-jsonschema")
    return [exe] if exe else [sys.executable, "-m", "check_jsonschema"]


def schema_check(files: list[Path]) -> list[str]:
    """Validates each file as written. Override files may use `!reset`/`!override`, which
    check-jsonschema's YAML parser does not know: those are checked with each tag replaced by its
    value (a copy in a temporary file)."""
    cmd = check_jsonschema_cmd() + ["--builtin-schema", "vendor.compose-spec"]
    errors = []
    with tempfile.TemporaryDirectory(prefix="check-compose-") as tmp:
        for f in files:
            target = f
            if re.search(r"!(reset|override)\b", f.read_text(encoding="utf-8")):
                target = Path(tmp) / f.name
                target.write_text(yaml_module().safe_dump(untag(load_yaml(f)), sort_keys=False), encoding="utf-8")
            r = subprocess.run(cmd + [str(target)], capture_output=True, text=True)
            if r.returncode != 0:
                out = (r.stdout + r.stderr).strip().replace(str(target), str(f))
                errors.append(f"{f}: does not match the compose-spec schema:\n{out}")
    return errors


# ---------------------------------------------------------------- loading and merging


def yaml_module():
    try:
        import yaml  # PyYAML, a dependency of check-jsonschema's toolchain here
    except ImportError:
        check_jsonschema_cmd()
        try:
            import yaml
        except ImportError:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "pyyaml"])
            import yaml
    return yaml


class Reset:
    """`!reset` (drop the inherited value) or `!override` (replace it) from an override file."""

    def __init__(self, value, replace: bool):
        self.value = value
        self.replace = replace


def load_yaml(path: Path):
    yaml = yaml_module()

    class Loader(yaml.SafeLoader):
        pass

    def construct(replace: bool):
        def f(loader, node):
            if isinstance(node, yaml.MappingNode):
                value = loader.construct_mapping(node, deep=True)
            elif isinstance(node, yaml.SequenceNode):
                value = loader.construct_sequence(node, deep=True)
            else:
                value = loader.construct_scalar(node)
            return Reset(value, replace)

        return f

    Loader.add_constructor("!reset", construct(False))
    Loader.add_constructor("!override", construct(True))
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.load(fh, Loader=Loader)  # noqa: S506 - SafeLoader subclass
    except OSError as e:
        fail_tooling(f"cannot read {path}: {e}")
    except yaml.YAMLError as e:
        fail_tooling(f"{path} is not valid YAML: {e}")
    if not isinstance(doc, dict):
        fail_tooling(f"{path}: the top level must be a mapping")
    return doc


VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value, env: dict[str, str]):
    """Compose variable interpolation: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR:+a}."""
    if isinstance(value, Reset):
        return Reset(interpolate(value.value, env), value.replace)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        have = name in env
        val = env.get(name, "")
        if op in (":-", "-"):
            use_default = (not have) or (op == ":-" and val == "")
            return interpolate(arg, env) if use_default else val
        if op in (":+", "+"):
            present = have and (op == "+" or val != "")
            return interpolate(arg, env) if present else ""
        return val  # ${VAR}, $VAR, ${VAR:?err}: unset means empty here

    return VAR.sub(sub, value)


# Service keys whose lists merge (union) across files; others replace.
MERGED_LISTS = {"ports", "expose", "external_links", "dns", "dns_search", "tmpfs", "cap_add",
                "cap_drop", "devices", "security_opt", "volumes", "configs", "secrets"}


def merge(base, over, key: str | None = None):
    if isinstance(over, Reset):
        return over.value if over.replace else None
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            merged = merge(base.get(k), v, k) if k in base else strip_resets(v)
            if merged is None and isinstance(v, Reset):
                out.pop(k, None)
            else:
                out[k] = merged
        return out
    if isinstance(base, list) and isinstance(over, list) and key in MERGED_LISTS:
        return base + [x for x in over if x not in base]
    return strip_resets(over)


def untag(v):
    """The document with every `!reset`/`!override` replaced by its plain value."""
    if isinstance(v, Reset):
        return untag(v.value)
    if isinstance(v, dict):
        return {k: untag(x) for k, x in v.items()}
    if isinstance(v, list):
        return [untag(x) for x in v]
    return v


def strip_resets(v):
    if isinstance(v, Reset):
        return v.value if v.replace else None
    if isinstance(v, dict):
        return {k: strip_resets(x) for k, x in v.items() if not (isinstance(x, Reset) and not x.replace)}
    if isinstance(v, list):
        return [strip_resets(x) for x in v]
    return v


# ---------------------------------------------------------------- semantic rules


def as_names(value) -> list[str]:
    """depends_on / networks / configs: a list of names or a mapping keyed by name."""
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value)
    return [v if isinstance(v, str) else v.get("source", "") for v in value]


def service_networks(svc: dict) -> list[str]:
    if "network_mode" in svc:
        return []
    nets = as_names(svc.get("networks"))
    return nets or ["default"]


def volume_mounts(svc: dict) -> list[tuple[str, str, str]]:
    """(type, source, target) for each mount in short or long syntax."""
    out = []
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            out.append((v.get("type", "volume"), str(v.get("source", "")), str(v.get("target", ""))))
            continue
        parts = str(v).split(":")
        if len(parts) == 1:
            out.append(("volume", "", parts[0]))  # anonymous volume
            continue
        src, target = parts[0], parts[1]
        is_path = src.startswith(("/", ".", "~"))
        out.append(("bind" if is_path else "volume", src, target))
    return out


def published_ports(svc: dict) -> list[str]:
    ports = []
    for p in svc.get("ports") or []:
        ports.append(str(p.get("published", p.get("target"))) if isinstance(p, dict) else str(p))
    return ports


def dockerfile_stages(path: Path) -> set[str]:
    stages = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*FROM\s+(?:--\S+\s+)*\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if m:
            stages.add(m.group(1).lower())
    return stages


def env_of(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def semantic_check(doc: dict, project: Path, public: str) -> list[str]:
    errors: list[str] = []
    err = errors.append
    services = doc.get("services") or {}
    networks = doc.get("networks") or {}
    volumes = doc.get("volumes") or {}
    configs = doc.get("configs") or {}
    secrets = doc.get("secrets") or {}
    if not services:
        return ["no services defined"]

    for name, svc in services.items():
        svc = svc or {}
        where = f"services.{name}"
        if "image" not in svc and "build" not in svc:
            err(f"{where}: needs an image or a build")
        for dep in as_names(svc.get("depends_on")):
            if dep not in services:
                err(f"{where}.depends_on: no service named {dep!r}")
            elif dep == name:
                err(f"{where}.depends_on: a service cannot depend on itself")
        mode = str(svc.get("network_mode", ""))
        if mode.startswith("service:") and mode[len("service:"):] not in services:
            err(f"{where}.network_mode: no service named {mode[len('service:'):]!r}")
        for net in as_names(svc.get("networks")):
            if net not in networks and net != "default":
                err(f"{where}.networks: no network named {net!r} under top-level networks")
        for kind, src, target in volume_mounts(svc):
            if kind == "volume" and src and src not in volumes:
                err(f"{where}.volumes: named volume {src!r} (for {target}) is not declared under top-level volumes")
            if kind == "bind" and src and not src.startswith("~"):
                if not (project / src).exists():
                    err(f"{where}.volumes: bind source {src} does not exist (relative to {project})")
        for cfg in as_names(svc.get("configs")):
            if cfg not in configs:
                err(f"{where}.configs: no config named {cfg!r} under top-level configs")
        for sec in as_names(svc.get("secrets")):
            if sec not in secrets:
                err(f"{where}.secrets: no secret named {sec!r} under top-level secrets")

        build = svc.get("build")
        if build is not None:
            if isinstance(build, str):
                build = {"context": build}
            ctx_s = str(build.get("context", "."))
            if "://" in ctx_s or ctx_s.startswith("git@"):
                continue
            ctx = project / ctx_s
            if not ctx.is_dir():
                err(f"{where}.build.context: {ctx_s} is not a directory (relative to {project})")
                continue
            if "dockerfile_inline" in build:
                continue
            dockerfile = ctx / str(build.get("dockerfile", "Dockerfile"))
            if not dockerfile.is_file():
                err(f"{where}.build.dockerfile: {dockerfile.relative_to(project) if dockerfile.is_relative_to(project) else dockerfile} does not exist")
                continue
            target = build.get("target")
            if target and str(target).lower() not in dockerfile_stages(dockerfile):
                err(f"{where}.build.target: {dockerfile.name} has no stage named {target!r}")

    for name, spec in configs.items():
        f = (spec or {}).get("file")
        if f and not (project / str(f)).is_file():
            err(f"configs.{name}.file: {f} does not exist (relative to {project})")
    for name, spec in secrets.items():
        f = (spec or {}).get("file")
        if f and not str(f).startswith(SECRETS_DIR) and not (project / str(f)).is_file():
            err(f"secrets.{name}.file: {f} does not exist (relative to {project})")

    # The gateway's secrets: every PFORTE_*_FILE under /run/secrets and every client_secret_file
    # of its config name a secret the gateway mounts; the log format is settable.
    gw = services.get(GATEWAY)
    if gw is not None:
        gw_env = env_of(gw)
        mounted = {f"/run/secrets/{n}" for n in as_names(gw.get("secrets"))}
        for key, value in gw_env.items():
            if key.endswith("_FILE") and value.startswith("/run/secrets/") and value not in mounted:
                err(f"services.{GATEWAY}.environment.{key}: {value} is not a secret the gateway mounts")
        for cfg in gw.get("configs") or []:
            source = (configs.get(cfg["source"] if isinstance(cfg, dict) else cfg) or {}).get("file")
            path = project / str(source) if source else None
            if path and path.is_file():
                for m in re.finditer(r'^\s*client_secret_file\s*=\s*"([^"]+)"', path.read_text(), re.M):
                    if m.group(1).startswith("/run/secrets/") and m.group(1) not in mounted:
                        err(f"{source}: client_secret_file {m.group(1)} is not a secret the gateway mounts")
        if "PFORTE_LOG_FORMAT" not in gw_env:
            err(f"services.{GATEWAY}.environment: no PFORTE_LOG_FORMAT (text or json for a log collector)")

    # Only the public service publishes ports; nothing runs on the host network.
    if public not in services:
        err(f"services.{public}: missing (it is the one service that publishes a port)")
    elif not published_ports(services[public]):
        err(f"services.{public}: publishes no port, so nothing can reach the stack")
    for name, svc in services.items():
        svc = svc or {}
        if name != public and published_ports(svc):
            err(f"services.{name}.ports: only {public!r} may publish ports; {name!r} publishes {published_ports(svc)}")
        if str(svc.get("network_mode", "")) == "host":
            err(f"services.{name}.network_mode: host networking bypasses the gateway")

    # The MCP service: internal networks only, reachable by the gateway under an allowed Host.
    mcp = services.get(MCP_SERVICE)
    if mcp is None:
        err(f"services.{MCP_SERVICE}: missing")
    else:
        nets = service_networks(mcp)
        if "network_mode" in mcp:
            err(f"services.{MCP_SERVICE}.network_mode: it must sit on an internal network, not {mcp['network_mode']!r}")
        for net in nets:
            if not (networks.get(net) or {}).get("internal", False):
                err(f"services.{MCP_SERVICE}.networks: {net!r} is not internal (set internal: true); "
                    "the MCP service must not be reachable except through the gateway")
        gw = services.get(GATEWAY)
        if gw is not None:
            if not set(nets) & set(service_networks(gw)):
                err(f"services.{GATEWAY} and services.{MCP_SERVICE} share no network")
            gw_env = env_of(gw)
            upstreams = [u.strip() for u in gw_env.get("PFORTE_UPSTREAM_URLS", "").split(",") if u.strip()]
            if gw_env.get("PFORTE_UPSTREAM_URL"):
                if upstreams:
                    err(f"services.{GATEWAY}.environment: PFORTE_UPSTREAM_URL and PFORTE_UPSTREAM_URLS are "
                        "both set; the gateway refuses that (reset one with `!reset null`)")
                upstreams.append(gw_env["PFORTE_UPSTREAM_URL"])
            for upstream in upstreams:
                m = re.match(r"http://([^/:]+)(?::(\d+))?", upstream)
                if not m:
                    err(f"services.{GATEWAY}.environment: upstream {upstream!r} is not http://host[:port]/path")
                    continue
                host = m.group(1)
                service = service_of_host(host, doc)
                if service is None:
                    err(f"services.{GATEWAY}: upstream host {host!r} is not a service (nor a replica "
                        f"{doc.get('name', 'PROJECT')}-SERVICE-N of one)")
                if service == MCP_SERVICE:
                    allowed = [h.strip() for h in env_of(mcp).get("MCP_SERVICE_ALLOWED_HOSTS", "").split(",")]
                    if host not in allowed:
                        err(f"services.{MCP_SERVICE}.environment.MCP_SERVICE_ALLOWED_HOSTS must name {host!r} "
                            "(the Host the gateway forwards), or rmcp answers 403")
                    listen = env_of(mcp).get("MCP_SERVICE_LISTEN", "")
                    if not listen or listen.startswith(("127.", "localhost", "[::1]")):
                        err(f"services.{MCP_SERVICE}.environment.MCP_SERVICE_LISTEN: {listen or 'unset'!r} "
                            "is loopback inside the container; the gateway cannot reach it (use 0.0.0.0:PORT)")

    # Every URL in an environment that names a service host must reach it over a shared network.
    for name, svc in services.items():
        for key, values in env_of(svc or {}).items():
            for value in values.split(","):
                m = re.match(r"(?:redis|rediss|http)://(?:[^@/]*@)?([A-Za-z0-9_.-]+)", value.strip())
                if not m or m.group(1) in ("localhost", "127.0.0.1") or "." in m.group(1):
                    continue
                host = service_of_host(m.group(1), doc)
                if host is None:
                    err(f"services.{name}.environment.{key}: {m.group(1)!r} is not a service")
                elif not set(service_networks(svc or {})) & set(service_networks(services[host] or {})):
                    err(f"services.{name}.environment.{key}: {name!r} and {host!r} share no network")

    # Redis: healthcheck, persistent named volume, AOF.
    redis = services.get(REDIS)
    if redis is None:
        err(f"services.{REDIS}: missing")
    else:
        hc = redis.get("healthcheck") or {}
        test = hc.get("test")
        if not test or hc.get("disable") or test == ["NONE"]:
            err(f"services.{REDIS}.healthcheck: needs a test (e.g. redis-cli ping)")
        mounts = volume_mounts(redis)
        if not any(kind == "volume" and src and src in volumes for kind, src, _ in mounts):
            err(f"services.{REDIS}.volumes: needs a named volume (declared under top-level volumes)")
        elif not any(kind == "volume" and src and target.rstrip("/") == "/data" for kind, src, target in mounts):
            err(f"services.{REDIS}.volumes: the named volume must be mounted at /data, where redis writes")
        cmd = redis.get("command") or []
        cmd = cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]
        joined = " ".join(cmd)
        if not re.search(r"--appendonly\s+yes", joined):
            err(f"services.{REDIS}.command: needs `--appendonly yes` (AOF) so a restart loses no token")

        # A password: on the command line, or in a config file on a volume the init step fills.
        conf_mount = None
        if len(cmd) > 1 and cmd[0] == "redis-server" and not cmd[1].startswith("-"):
            conf = cmd[1]
            for kind, src, target in mounts:
                if kind == "volume" and src and conf.startswith(target.rstrip("/") + "/"):
                    conf_mount = src
        writers = [n for n, svc in services.items()
                   if n != REDIS and conf_mount
                   and any(src == conf_mount and not target.endswith(":ro")
                           for _, src, target in volume_mounts(svc or {}))]
        if "--requirepass" not in cmd and not (conf_mount and writers):
            err(f"services.{REDIS}.command: redis must require a password: `--requirepass`, or a config "
                "file (with requirepass) on a named volume that the init step writes")
        hc_text = " ".join(str(t) for t in (test or []))
        if "redis-cli" in hc_text and "PONG" not in hc_text:
            err(f"services.{REDIS}.healthcheck: with a password `redis-cli ping` exits 0 on NOAUTH; "
                "authenticate and match PONG")
        # Only gateways on redis's networks.
        for net in service_networks(redis):
            if not (networks.get(net) or {}).get("internal", False):
                err(f"services.{REDIS}.networks: {net!r} is not internal (set internal: true)")
            others = [n for n, svc in services.items()
                      if n not in (REDIS, GATEWAY) and net in service_networks(svc or {})]
            if others:
                err(f"services.{REDIS}.networks: {net!r} is also joined by {others}; only the gateway "
                    "may reach redis (one HSET + INCR there mints a token)")
        gw = services.get(GATEWAY) or {}
        gw_env = env_of(gw)
        url = gw_env.get("PFORTE_REDIS_URL", "")
        if url and not re.match(r"rediss?://[^@/]*:[^@/]+@", url):
            err(f"services.{GATEWAY}.environment.PFORTE_REDIS_URL: {url!r} has no password; redis requires "
                "one (use PFORTE_REDIS_URL_FILE with the file the init step writes)")
        if not url and not gw_env.get("PFORTE_REDIS_URL_FILE"):
            err(f"services.{GATEWAY}.environment: neither PFORTE_REDIS_URL nor PFORTE_REDIS_URL_FILE names redis")

    # mcp-service: its documents on its own named volume, or (replicas) in a redis of its own.
    if mcp is not None:
        mcp_env = env_of(mcp)
        data_dir = mcp_env.get("MCP_SERVICE_DATA_DIR", "")
        if mcp_env.get("MCP_SERVICE_STORE") == "redis":
            errors += documents_redis_check(doc, mcp_env.get("MCP_SERVICE_REDIS_URL", ""))
        elif not data_dir:
            err(f"services.{MCP_SERVICE}.environment.MCP_SERVICE_DATA_DIR: unset; the documents would land "
                "in the container's working dir and vanish with it")
        elif not any(kind == "volume" and src and src in volumes and target.rstrip("/") == data_dir.rstrip("/")
                     for kind, src, target in volume_mounts(mcp)):
            err(f"services.{MCP_SERVICE}.volumes: no named volume mounted at MCP_SERVICE_DATA_DIR ({data_dir})")

    # The gateway's healthcheck: /readyz, so "running" means serving.
    gw = services.get(GATEWAY)
    if gw is not None:
        hc = gw.get("healthcheck") or {}
        test = " ".join(str(t) for t in (hc.get("test") or []))
        if hc.get("disable") or "/readyz" not in test:
            err(f"services.{GATEWAY}.healthcheck: needs a test on /readyz (e.g. curl -fsSk https://127.0.0.1:8443/readyz)")

    return errors


def service_of_host(host: str, doc: dict) -> str | None:
    """The service a host name reaches: the service's own name, or a replica's container name
    `<project>-<service>-<n>` (what `--scale` creates and Docker DNS resolves)."""
    services = doc.get("services") or {}
    if host in services:
        return host
    m = re.fullmatch(r"(.+)-(\d+)", host)
    prefix = f"{doc.get('name', '')}-"
    if m and doc.get("name") and m.group(1).startswith(prefix) and m.group(1)[len(prefix):] in services:
        return m.group(1)[len(prefix):]
    return None


def documents_redis_check(doc: dict, url: str) -> list[str]:
    """mcp-service replicas share documents through redis: a service of its own (not the
    gateway's redis), durable (AOF, a named volume at /data), healthy, and on internal networks
    that only mcp-service joins."""
    services = doc.get("services") or {}
    networks = doc.get("networks") or {}
    where = f"services.{MCP_SERVICE}.environment.MCP_SERVICE_REDIS_URL"
    m = re.match(r"rediss?://(?:[^@/]*@)?([A-Za-z0-9_.-]+)", url)
    if not m:
        return [f"{where}: {url or 'unset'!r}; MCP_SERVICE_STORE=redis needs redis://HOST:PORT/DB"]
    host = m.group(1)
    if host == REDIS:
        return [f"{where}: names the gateway's redis; mcp-service parses untrusted text and must not "
                "reach it (give the documents a redis of their own)"]
    svc = services.get(host)
    if svc is None:
        return [f"{where}: {host!r} is not a service"]
    errors = []
    cmd = svc.get("command") or []
    joined = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    if not re.search(r"--appendonly\s+yes", joined):
        errors.append(f"services.{host}.command: needs `--appendonly yes` (AOF) so a restart loses no document")
    if not any(kind == "volume" and src and target.rstrip("/") == "/data" for kind, src, target in volume_mounts(svc)):
        errors.append(f"services.{host}.volumes: needs a named volume at /data, where redis writes")
    hc = svc.get("healthcheck") or {}
    if not hc.get("test") or hc.get("disable"):
        errors.append(f"services.{host}.healthcheck: needs a test (redis-cli ping)")
    for net in service_networks(svc):
        if not (networks.get(net) or {}).get("internal", False):
            errors.append(f"services.{host}.networks: {net!r} is not internal (set internal: true)")
        others = [n for n, s in services.items() if n not in (host, MCP_SERVICE) and net in service_networks(s or {})]
        if others:
            errors.append(f"services.{host}.networks: {net!r} is also joined by {others}; only mcp-service "
                          "holds the documents")
    return errors


def check_variant(files: list[Path], public: str) -> list[str]:
    project = files[0].resolve().parent
    label = " + ".join(str(f) for f in files)
    errors = schema_check(files)
    merged: dict = {}
    for f in files:
        merged = merge(merged, load_yaml(f))
    merged = interpolate(merged, {})
    errors += semantic_check(merged, project, public)
    if errors:
        print(f"FAIL {label}:")
        for e in errors:
            print("  - " + e.replace("\n", "\n    "))
    else:
        n = len(merged.get("services") or {})
        print(f"ok   {label}: schema valid; {n} services; only {public!r} publishes ports")
    return errors


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compose", type=Path)
    ap.add_argument("overrides", type=Path, nargs="*", help="override files, merged in order")
    ap.add_argument("--public", default=None, help=f"the service allowed to publish ports (default {GATEWAY!r})")
    args = ap.parse_args(argv)
    for f in [args.compose, *args.overrides]:
        if not f.is_file():
            fail_tooling(f"{f}: no such file")

    variants = [([args.compose, *args.overrides], args.public or GATEWAY)]
    if not args.overrides:
        for override, public in (
            (SCALE_OVERRIDE, SCALE_PUBLIC),
            (REPLICAS_OVERRIDE, GATEWAY),
            (CADDY_OVERRIDE, CADDY_PUBLIC),
            (TEAM_OVERRIDE, GATEWAY),
        ):
            f = args.compose.resolve().parent / override
            if f.is_file():
                shown = f.relative_to(Path.cwd()) if f.is_relative_to(Path.cwd()) else f
                variants.append(([args.compose, shown], args.public or public))
    failed = False
    for files, public in variants:
        failed |= bool(check_variant(files, public))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
