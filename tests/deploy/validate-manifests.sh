#!/usr/bin/env bash
# Checks the deployment files without a cluster:
#   - every manifest in deploy/kubernetes (but kustomization.yaml) against
#     the Kubernetes API schemas, strictly (an unknown or misspelt field
#     fails), with kubernetes-validate;
#   - the kustomization builds, when kubectl is here;
#   - the Grafana dashboard is JSON;
#   - every fusebox_* metric the dashboard queries is one a node exports,
#     when given the list: a file with one name a line, or a node's
#     /metrics page (curl -s http://127.0.0.1:7680/metrics > metrics.txt).
#
# Usage: tests/deploy/validate-manifests.sh [METRIC_LIST]
# Exits 1 if any check fails, after running them all.
set -euo pipefail

# The Kubernetes version whose schemas the manifests must pass: the oldest
# release the manifests are meant for (kubernetes-validate --help lists
# its default, the newest it ships).
K8S_VERSION=1.30.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
manifests="$root/deploy/kubernetes"
dashboard="$root/deploy/grafana/fusebox-dashboard.json"
metric_list=${1:-}
failed=0

fail() {
    echo "FAIL: $*"
    failed=1
}

if ! command -v kubernetes-validate >/dev/null; then
    echo "installing kubernetes-validate (pip)"
    python3 -m pip install -q kubernetes-validate==1.37.0
fi
if command -v kubernetes-validate >/dev/null; then
    validate=(kubernetes-validate)
else
    # pip put the script somewhere off PATH; the module runs the same.
    validate=(python3 -m kubernetes_validate)
fi

echo "== Kubernetes manifests: strict schemas of Kubernetes $K8S_VERSION"
shopt -s nullglob
files=()
for f in "$manifests"/*.yaml "$manifests"/*.yml; do
    [[ $(basename "$f") == kustomization.y*ml ]] || files+=("$f")
done
if ((${#files[@]} == 0)); then
    fail "no manifests in $manifests"
fi
for f in "${files[@]}"; do
    if ! "${validate[@]}" --strict -k "$K8S_VERSION" "$f"; then
        fail "${f#"$root"/} does not match the schemas"
    fi
done

echo "== kustomization"
if command -v kubectl >/dev/null; then
    if built=$(kubectl kustomize "$manifests" 2>&1); then
        echo "kubectl kustomize builds: $(grep -c '^kind:' <<<"$built") objects"
    else
        echo "$built"
        fail "kubectl kustomize ${manifests#"$root"/} does not build"
    fi
else
    echo "skipped: no kubectl here"
fi

echo "== Grafana dashboard"
dashboard_is_json=0
if python3 -m json.tool "$dashboard" >/dev/null; then
    echo "${dashboard#"$root"/} is JSON"
    dashboard_is_json=1
else
    fail "${dashboard#"$root"/} is not JSON"
fi

echo "== dashboard metrics"
if [[ -z $metric_list ]]; then
    echo "skipped: no metric list given (usage: $0 METRIC_LIST)"
elif ((!dashboard_is_json)); then
    echo "skipped: the dashboard is not JSON"
elif [[ ! -r $metric_list ]]; then
    fail "cannot read the metric list $metric_list"
else
    # The names the dashboard queries, and the names the list holds: a
    # list's lines are names; a /metrics page's samples give theirs, and its
    # `# TYPE` lines the names of every family, sampled yet or not.
    if ! python3 - "$dashboard" "$metric_list" <<'EOF'; then
import json
import re
import sys

dashboard, listing = sys.argv[1], sys.argv[2]
NAME = re.compile(r"fusebox_[A-Za-z0-9_:]*")
SUFFIXES = {
    "counter": ["_total"],
    "histogram": ["_bucket", "_sum", "_count"],
    "summary": ["_sum", "_count", ""],
}

def queries(node):
    """Every PromQL text in the dashboard: targets and variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)

with open(dashboard) as f:
    used = {name for text in queries(json.load(f)) for name in NAME.findall(text)}

known = set()
with open(listing) as f:
    for line in f:
        words = line.split()
        if len(words) >= 4 and words[:2] == ["#", "TYPE"]:
            known.update(words[2] + s for s in SUFFIXES.get(words[3], [""]))
        elif words and not words[0].startswith("#"):
            known.add(words[0].split("{")[0])

missing = sorted(used - known)
for name in sorted(used):
    print(("missing " if name in missing else "ok      ") + name)
sys.exit(1 if missing else 0)
EOF
        fail "the dashboard queries metrics not in $metric_list"
    fi
fi

if ((failed)); then
    echo "deploy checks FAILED"
    exit 1
fi
echo "deploy checks passed"
