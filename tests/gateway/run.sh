#!/usr/bin/env bash
# The gateway test (test_gateway.py): `fusebox gateway` between the official
# MCP Python SDK's client and a FastMCP upstream, in front of a real
# 3-node cluster.
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
    cargo build -p fusebox-cli --locked
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
