#!/usr/bin/env bash
# The gateway's added latency: starts a single-node cluster, the FastMCP
# upstream of the gateway test (tests/gateway/upstream.py) and one
# `fusebox gateway` in front of it, then runs `fusebox bench gateway`, which
# calls the upstream's `lookup` directly and through the gateway, in turns,
# at each count of concurrent agents, and prints p50/p99 of both and what
# the gateway adds.
#
# Usage: tests/gateway/bench.sh FUSEBOX_BINARY [fusebox bench gateway flags]
#   e.g. tests/gateway/bench.sh target/release/fusebox --agents 1,32 --seconds 20
# The Python side comes from the venv tests/gateway/run.sh installs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$(realpath "${1:?usage: bench.sh FUSEBOX_BINARY [flags]}")
shift
venv=${FUSEBOX_GATEWAY_VENV:-$HOME/.cache/fusebox-gateway-venv}
python="$venv/bin/python"
if ! "$python" -c 'import fastmcp' 2>/dev/null; then
    echo "no FastMCP in $venv: run tests/gateway/run.sh once first" >&2
    exit 2
fi

tmp=$(mktemp -d /tmp/fusebox-gateway-bench.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# N distinct free loopback ports, all bound at once (taken one by one, a
# port released can come back for the next).
free_ports() {
    "$python" -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
wait_port() {
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listened on port $1 ($2)" >&2
    exit 1
}

read -r api http upstream gateway <<< "$(free_ports 4)"
"$bin" serve --listen "127.0.0.1:$api" --http "127.0.0.1:$http" --data "$tmp/data" \
    > "$tmp/node.log" 2>&1 &
pids+=($!)
mkdir -p "$tmp/upstream"
"$python" "$root/tests/gateway/upstream.py" "$upstream" "$tmp/upstream" > "$tmp/upstream.log" 2>&1 &
pids+=($!)
wait_port "$api" "the node"
wait_port "$upstream" "the upstream"
cat > "$tmp/gateway.toml" <<EOF
listen = "127.0.0.1:$gateway"
namespace = "bench"
replica_id = "bench-gateway"
cluster = ["127.0.0.1:$api"]

[[upstream]]
name = "vendor"
url = "http://127.0.0.1:$upstream/mcp"
EOF
RUST_LOG=warn "$bin" gateway --config "$tmp/gateway.toml" > "$tmp/gateway.log" 2>&1 &
pids+=($!)
wait_port "$gateway" "the gateway"

if ! "$bin" bench gateway \
    --direct "http://127.0.0.1:$upstream/mcp" \
    --via "http://127.0.0.1:$gateway/servers/vendor/mcp" \
    --tool lookup --arguments '{"city": "Austin"}' "$@"; then
    echo "--- gateway log:" >&2
    tail -20 "$tmp/gateway.log" >&2
    exit 1
fi
