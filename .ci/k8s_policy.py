#!/usr/bin/env python3
# .ci/k8s_policy.py (owned by deploy): the project's own rules for deploy/kubernetes/ (issue 44,
# point 1), each asserted per workload and per container, so a manifest that drops one fails CI.
"""Check deploy/kubernetes/ against Pforte's deployment rules.

usage: python3 .ci/k8s_policy.py [--self-test]

Needs PyYAML (the venv .ci/k8s_check.sh makes). Without --self-test: prints every violation and
exits 1 when there is one. With --self-test: also drops each rule's field from a copy of the
manifests in turn and checks that the policy then fails (a rule nobody can break is no rule).
"""

from __future__ import annotations

import copy
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "deploy/kubernetes"
NAMESPACE = "pforte"
# Files beside the kustomization that it must not list (examples applied by hand).
EXAMPLES = {"ingress-example.yaml"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
# HTTP services: liveness on /healthz and readiness on /readyz.
HTTP_CONTAINERS = {"gateway", "mcp-service"}
SECRET_WORDS = re.compile(r"(password|secret|vault_key|private key|BEGIN [A-Z ]*KEY)", re.I)


def load() -> dict[str, list[dict]]:
    """Every manifest file of the directory: its documents (the kustomization included)."""
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(DIR.glob("*.yaml"))
    }


def runtime_stop_secs() -> int:
    """What the gateway takes after the drain (pingora's graceful_shutdown_timeout_seconds)."""
    text = (ROOT / "gateway/src/runtime.rs").read_text()
    m = re.search(r"graceful_shutdown_timeout_seconds:\s*Some\((\d+)\)", text)
    return int(m.group(1)) if m else 0


def compose_images() -> set[str]:
    """The `image:` names of the compose files (read as lines: they use compose's `!reset`)."""
    images = set()
    for f in ("compose.yaml", "deploy/compose.replicas.yaml"):
        images |= set(re.findall(r"^\s+image:\s*(\S+)\s*$", (ROOT / f).read_text(), re.M))
    return images


def pod_spec(obj: dict) -> dict:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def check(files: dict[str, list[dict]]) -> list[str]:
    errors: list[str] = []

    def need(cond: object, what: str) -> None:
        if not cond:
            errors.append(what)

    kust = files.get("kustomization.yaml", [{}])[0]
    listed = set(kust.get("resources", []))
    others = set(files) - {"kustomization.yaml"} - EXAMPLES
    need(listed == others, f"kustomization resources {sorted(listed)} != files {sorted(others)}")
    need(kust.get("namespace") == NAMESPACE, "kustomization: namespace pforte")
    generated = {g["name"]: g for g in kust.get("secretGenerator", [])}
    generated_keys = {
        (name, f.split("=", 1)[0]) for name, g in generated.items() for f in g.get("files", [])
    }
    for key in ["vault_key", "oidc_client_secret"]:
        need(("pforte-gateway-secrets", key) in generated_keys, f"Secret for {key}")
    need(("pforte-redis", "password") in generated_keys, "Secret for the redis password")

    objs = [(name, o) for name, docs in files.items() if name != "kustomization.yaml" for o in docs]
    kinds = {(o["kind"], o["metadata"]["name"]): o for _, o in objs}
    need(("Namespace", NAMESPACE) in kinds, "a Namespace pforte")
    images = compose_images()

    # ConfigMaps: configuration only, never a secret.
    for _, o in objs:
        if o["kind"] == "Secret":
            errors.append(f"Secret {o['metadata']['name']} in a manifest (secretGenerator only)")
        if o["kind"] != "ConfigMap":
            continue
        for key, value in (o.get("data") or {}).items():
            if key.endswith(".toml"):
                cfg = tomllib.loads(value)
                flat = yaml.safe_dump(cfg)
                need("redis_url" not in cfg, f"ConfigMap {key}: redis_url (a secret) inline")
                need("client_secret:" not in flat, f"ConfigMap {key}: an inline client_secret")
            elif not key.endswith(".sh"):
                need(not SECRET_WORDS.search(key + value), f"ConfigMap key {key} looks secret")
    cfg = tomllib.loads(kinds.get(("ConfigMap", "pforte-config"), {"data": {"pforte.toml": ""}})
                        ["data"].get("pforte.toml", ""))
    need(cfg.get("listen", "").endswith(":8443"), "pforte.toml listens on 8443")

    for _, o in objs:
        if o["kind"] not in WORKLOADS:
            continue
        w = f"{o['kind']}/{o['metadata']['name']}"
        spec = pod_spec(o)
        psc = spec.get("securityContext", {})
        need(spec.get("automountServiceAccountToken") is False, f"{w}: no service account token")
        need(psc.get("runAsNonRoot") is True, f"{w}: pod runAsNonRoot")
        need(psc.get("runAsUser", 0) != 0, f"{w}: pod runAsUser not 0")
        grace = spec.get("terminationGracePeriodSeconds")
        need(grace is not None, f"{w}: terminationGracePeriodSeconds set")
        containers = spec.get("containers", [])
        for c, init in [(c, False) for c in containers] + [
            (c, True) for c in spec.get("initContainers", [])
        ]:
            cn = f"{w}/{c['name']}"
            sc = c.get("securityContext", {})
            need(sc.get("allowPrivilegeEscalation") is False, f"{cn}: allowPrivilegeEscalation false")
            need(sc.get("readOnlyRootFilesystem") is True, f"{cn}: readOnlyRootFilesystem")
            need("ALL" in sc.get("capabilities", {}).get("drop", []), f"{cn}: drop ALL capabilities")
            need(not sc.get("capabilities", {}).get("add"), f"{cn}: no added capabilities")
            need(sc.get("privileged") is not True, f"{cn}: not privileged")
            need(sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, f"{cn}: non-root")
            need(sc.get("runAsUser", psc.get("runAsUser", 0)) != 0, f"{cn}: uid not 0")
            seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
            need(seccomp == "RuntimeDefault", f"{cn}: seccomp RuntimeDefault")
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    need(r in res.get(kind, {}), f"{cn}: {kind}.{r}")
            need(c.get("image") in images, f"{cn}: image {c.get('image')} is one compose uses")
            if init:
                continue
            need("livenessProbe" in c, f"{cn}: livenessProbe")
            need("readinessProbe" in c, f"{cn}: readinessProbe")
            if c["name"] in HTTP_CONTAINERS:
                live = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
                ready = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
                need(live == "/healthz", f"{cn}: liveness /healthz")
                need(ready == "/readyz", f"{cn}: readiness /readyz")

    gw = kinds.get(("Deployment", "pforte-gateway"))
    need(gw is not None, "the gateway Deployment")
    if gw:
        spec = gw["spec"]
        need(spec.get("replicas") == 3, "gateway: 3 replicas")
        ru = spec.get("strategy", {}).get("rollingUpdate", {})
        need(spec.get("strategy", {}).get("type") == "RollingUpdate", "gateway: RollingUpdate")
        need(ru.get("maxUnavailable") == 0, "gateway: maxUnavailable 0")
        pod = pod_spec(gw)
        need(pod.get("topologySpreadConstraints"), "gateway: topology spread")
        c = next((c for c in pod["containers"] if c["name"] == "gateway"), {})
        pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        pause = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
        grace = pod.get("terminationGracePeriodSeconds", 0)
        need(pause > 0, "gateway: a preStop pause (leave the endpoints before draining)")
        drain = cfg.get("drain_secs")
        need(drain is not None, "pforte.toml: drain_secs stated")
        stop = pause + (drain or 0) + runtime_stop_secs()
        need(grace > stop, f"gateway: grace {grace} s > preStop {pause} s + drain {drain} s "
             f"+ runtime stop {runtime_stop_secs()} s")
        labels = gw["spec"]["selector"]["matchLabels"]
        pdbs = [o for _, o in objs if o["kind"] == "PodDisruptionBudget"
                and o["spec"]["selector"].get("matchLabels") == labels]
        need(pdbs, "gateway: a PodDisruptionBudget")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        need(env.get("PFORTE_REDIS_URL_FILE", "").startswith("/run/secrets/"),
             "gateway: redis URL from a secret file")
        need(env.get("PFORTE_VAULT_KEY_FILE", "").startswith("/run/secrets/"),
             "gateway: vault key from a secret file")
    mcp = kinds.get(("Deployment", "mcp-service"))
    need(mcp is not None, "the mcp-service Deployment")

    redis = kinds.get(("StatefulSet", "redis"))
    need(redis is not None, "the redis StatefulSet")
    if redis:
        need(redis["spec"].get("replicas") == 3, "redis: 3 pods (3 sentinels)")
        names = {c["name"] for c in pod_spec(redis)["containers"]}
        need({"redis", "sentinel"} <= names, "redis: a redis and a sentinel per pod")
        need(redis["spec"].get("volumeClaimTemplates"), "redis: a volume per pod")
        scripts = kinds.get(("ConfigMap", "redis-scripts"), {}).get("data", {})
        need("appendonly yes" in scripts.get("redis.sh", ""), "redis: AOF on")
        need("sentinel monitor" in scripts.get("sentinel.sh", ""), "redis: sentinel monitor")

    services = {o["metadata"]["name"]: o for _, o in objs if o["kind"] == "Service"}
    lbs = [s for s in services.values() if s["spec"].get("type") == "LoadBalancer"]
    need(lbs and all(p.get("protocol", "TCP") == "TCP" and p.get("port") == 443
                     for s in lbs for p in s["spec"]["ports"]),
         "a LoadBalancer Service on TCP 443 (TLS passthrough)")
    need(services.get("redis", {}).get("spec", {}).get("clusterIP") == "None",
         "redis: a headless Service")
    need("mcp-service" in services, "an mcp-service Service")

    pols = {o["metadata"]["name"]: o for _, o in objs if o["kind"] == "NetworkPolicy"}
    deny = [p for p in pols.values() if p["spec"].get("podSelector") == {}
            and set(p["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
            and not p["spec"].get("ingress") and not p["spec"].get("egress")]
    need(deny, "NetworkPolicy: default deny, ingress and egress")

    def sources(app: str) -> set[str] | None:
        """The apps allowed into `app`'s pods (None: some rule admits any source)."""
        allowed: set[str] = set()
        for p in pols.values():
            sel = p["spec"].get("podSelector", {}).get("matchLabels", {})
            if sel.get("app.kubernetes.io/name") != app:
                continue
            for rule in p["spec"].get("ingress", []):
                if not rule.get("from"):
                    return None
                for f in rule["from"]:
                    name = f.get("podSelector", {}).get("matchLabels", {}).get(
                        "app.kubernetes.io/name")
                    if name is None or "namespaceSelector" in f or "ipBlock" in f:
                        return None
                    allowed.add(name)
        return allowed

    need(sources("mcp-service") == {"pforte-gateway"}, "only the gateway reaches mcp-service")
    need(sources("redis") == {"pforte-gateway", "redis"}, "only the gateway (and redis) reach redis")
    gw_pol = [p for p in pols.values() if p["spec"].get("podSelector", {}).get("matchLabels", {})
              .get("app.kubernetes.io/name") == "pforte-gateway"]
    out = [r for p in gw_pol for r in p["spec"].get("egress", [])
           if any("ipBlock" in t for t in r.get("to", []))
           and any(pt.get("port") == 443 for pt in r.get("ports", []))]
    need(out, "the gateway reaches the IdP and the ACME CA (HTTPS egress)")
    return errors


def mutations() -> list[tuple[str, callable]]:
    """(what, drop): each removes one thing a rule asserts."""

    def wl(files, fname, i=0):
        return files[fname][i]

    def gw_container(files):
        return pod_spec(wl(files, "gateway-deployment.yaml"))["containers"][0]

    def redis_sentinel(files):
        return pod_spec(wl(files, "redis-statefulset.yaml"))["containers"][1]

    def init(files):
        return pod_spec(wl(files, "gateway-deployment.yaml"))["initContainers"][0]

    def mcp(files):
        return pod_spec(wl(files, "mcp-service.yaml", 1))["containers"][0]

    return [
        ("gateway maxUnavailable", lambda f: wl(f, "gateway-deployment.yaml")["spec"]["strategy"]
         ["rollingUpdate"].pop("maxUnavailable")),
        ("gateway replicas", lambda f: wl(f, "gateway-deployment.yaml")["spec"].update(replicas=2)),
        ("gateway topology spread", lambda f: pod_spec(wl(f, "gateway-deployment.yaml"))
         .pop("topologySpreadConstraints")),
        ("gateway PDB", lambda f: f.pop("gateway-pdb.yaml")),
        ("gateway grace", lambda f: pod_spec(wl(f, "gateway-deployment.yaml"))
         .update(terminationGracePeriodSeconds=5)),
        ("gateway readiness", lambda f: gw_container(f).pop("readinessProbe")),
        ("gateway readOnlyRootFilesystem", lambda f: gw_container(f)["securityContext"]
         .pop("readOnlyRootFilesystem")),
        ("init container caps", lambda f: init(f)["securityContext"].pop("capabilities")),
        ("init container limits", lambda f: init(f)["resources"].pop("limits")),
        ("sentinel privilege escalation", lambda f: redis_sentinel(f)["securityContext"]
         .update(allowPrivilegeEscalation=True)),
        ("sentinel requests", lambda f: redis_sentinel(f)["resources"].pop("requests")),
        ("mcp-service liveness", lambda f: mcp(f).pop("livenessProbe")),
        ("mcp-service root", lambda f: mcp(f)["securityContext"].update(runAsUser=0)),
        ("redis seccomp", lambda f: pod_spec(wl(f, "redis-statefulset.yaml"))["securityContext"]
         .pop("seccompProfile")),
        ("redis AOF", lambda f: wl(f, "redis-scripts.yaml")["data"].update(
            {"redis.sh": "exec redis-server"})),
        ("default deny", lambda f: f["networkpolicies.yaml"].pop(0)),
        ("mcp-service open", lambda f: f["networkpolicies.yaml"][3]["spec"]["ingress"][0]
         .pop("from")),
        ("a secret in a ConfigMap", lambda f: wl(f, "gateway-config.yaml")["data"].update(
            {"pforte.toml": wl(f, "gateway-config.yaml")["data"]["pforte.toml"]
             + '\n[[oauth.login.oidc]]\nclient_secret = "x"\n'})),
        ("vault key secret", lambda f: wl(f, "kustomization.yaml")["secretGenerator"][0]["files"]
         .pop(0)),
        ("LoadBalancer", lambda f: f.pop("gateway-loadbalancer.yaml")),
        ("image", lambda f: gw_container(f).update(image="pforte:latest")),
    ]


def main() -> int:
    files = load()
    errors = check(files)
    for e in errors:
        print(f"k8s policy: {e}", file=sys.stderr)
    if errors:
        return 1
    n_workloads = sum(o["kind"] in WORKLOADS for docs in files.values() for o in docs)
    print(f"k8s policy: {len(files)} files, {n_workloads} workloads: every rule holds")
    if "--self-test" in sys.argv:
        missed = []
        for what, drop in mutations():
            mutated = copy.deepcopy(files)
            drop(mutated)
            if not check(mutated):
                missed.append(what)
        for what in missed:
            print(f"k8s policy self-test: dropping {what} went unnoticed", file=sys.stderr)
        if missed:
            return 1
        print(f"k8s policy self-test: each of {len(mutations())} dropped rules fails the policy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
