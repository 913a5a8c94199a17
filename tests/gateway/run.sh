#!/usr/bin/env bash
# The gateway test (test_gateway.py): `fusebox gateway` between the official
# MCP Python SDK's client and FastMCP upstreams, in front of a real 3-node
# cluster; then a bounded run of the added-latency benchmark (bench.sh), so
# `fusebox bench gateway` keeps working.
#
# Installs the Python side in a virtual environment of its own (pinned:
# FastMCP 4.2.3 and the MCP SDK 2.3.0, from PyPI), kept in ~/.cache so a
# warm machine does not install it again.
#
# Usage: tests/gateway/run.sh [FUSEBOX_BINARY]
#   (default: the debug build in $CARGO_TARGET_DIR, built if missing)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

bin=${1:-${CARGO_TARGET_DIR:-$root/target}/debug/fusebox}
if [ ! -x "$bin" ]; then
    cargo test --workspace --no-run --locked  # the same build as scripts/test
fi

# A venv with exactly these pins, made again when they change.
ensure_venv() {
    local venv=$1 module=$2
    shift 2
    if ! "$venv/bin/python" -c "import $module" 2>/dev/null \
        || [ "$(cat "$venv/pins" 2>/dev/null)" != "$*" ]; then
        echo "==> installing $* into $venv"
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q "$@"
        echo "$*" > "$venv/pins"
    fi
}

venv=${FUSEBOX_GATEWAY_VENV:-$HOME/.cache/fusebox-gateway-venv}
ensure_venv "$venv" "fastmcp, mcp" fastmcp==4.2.3 mcp==2.3.0
# The task upstream: fastmcp-tasks pins its own FastMCP (4.1.4).
tasks_venv=${FUSEBOX_GATEWAY_TASKS_VENV:-$HOME/.cache/fusebox-gateway-tasks-venv}
ensure_venv "$tasks_venv" "fastmcp_tasks" fastmcp-tasks==4.1.4

FUSEBOX_TASKS_PYTHON=$tasks_venv/bin/python "$venv/bin/python" tests/gateway/test_gateway.py "$bin"

echo "==> a bounded run of the gateway benchmark"
FUSEBOX_GATEWAY_VENV=$venv tests/gateway/bench.sh "$bin" --agents 1,4 --seconds 1 --rounds 1 --warmup-seconds 0.2
