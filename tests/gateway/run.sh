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

venv=${FUSEBOX_GATEWAY_VENV:-$HOME/.cache/fusebox-gateway-venv}
pins=(fastmcp==4.2.3 mcp==2.3.0)
if ! "$venv/bin/python" -c 'import fastmcp, mcp' 2>/dev/null \
    || [ "$(cat "$venv/pins" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "==> installing ${pins[*]} into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${pins[@]}"
    echo "${pins[*]}" > "$venv/pins"
fi

"$venv/bin/python" tests/gateway/test_gateway.py "$bin"

echo "==> a bounded run of the gateway benchmark"
FUSEBOX_GATEWAY_VENV=$venv tests/gateway/bench.sh "$bin" --agents 1,4 --seconds 1 --rounds 1 --warmup-seconds 0.2
