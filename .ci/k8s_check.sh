#!/usr/bin/env bash
# .ci/k8s_check.sh (owned by deploy): deploy/kubernetes/ checked without a cluster: every
# manifest against the oldest and newest Kubernetes still supported (schemas bundled by
# kubernetes-validate, strict: unknown fields refused), yamllint, the project's policy (with its
# self-test), then the manifests' commands booted as processes (.ci/k8s_rehearsal.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# Supported upstream on 2026-12-05: 1.35 (the oldest, until 2027-02), 1.36 and 1.37 (the newest).
OLDEST=1.35.0
NEWEST=1.37.0
venv=target/k8s-venv
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/yamllint" ]; then
  echo "== installing kubernetes-validate and yamllint into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate==1.37.0 yamllint==1.38.0
fi
# The kustomization is not a Kubernetes object (no schema): the policy checks it.
manifests=()
for f in deploy/kubernetes/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || manifests+=("$f")
done
for version in "$OLDEST" "$NEWEST"; do
  echo "== kubernetes-validate --strict -k $version"
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
  echo "${#manifests[@]} files valid against Kubernetes $version"
done
echo "== yamllint"
"$venv/bin/yamllint" --strict -c .ci/yamllint.yaml deploy/kubernetes/
echo "== policy"
"$venv/bin/python" .ci/k8s_policy.py --self-test
echo "== rehearsal (the manifests' commands as processes)"
rc=0
"$venv/bin/python" .ci/k8s_rehearsal.py --bin-dir "${1:-target/debug}" || rc=$?
if [ "$rc" -eq 2 ]; then
  echo "(kubernetes rehearsal skipped: see above)"
elif [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
