#!/usr/bin/env bash
# The ledger pair, Fusebox against etcd, on this machine, in one sitting.
#
# Starts a 3-node Fusebox cluster, runs `fusebox bench ledger` at each
# client count, stops it; then the same with a 3-node etcd cluster and
# `fusebox bench etcd-ledger`. Both fsync every commit (their defaults).
# Needs `etcd` on PATH (Debian: apt-get install etcd-server).
#
#   bench/vs-etcd.sh [FUSEBOX_BINARY] [CLIENT COUNTS...]
#   bench/vs-etcd.sh target/release/fusebox 1 64 256
#
# Environment: SECONDS_EACH (default 10), WARMUP (2), WORK (a scratch
# directory, default a new one under /tmp), BASE_PORT (27600), TRANSPORTS
# (how Fusebox's calls travel, each measured in turn at every client count:
# default "pipeline"; "unary pipeline" measures both).
set -euo pipefail

FUSEBOX=${1:-target/release/fusebox}
shift || true
COUNTS=("${@:-1 64 256}")
read -r -a COUNTS <<< "${COUNTS[*]}"
SECONDS_EACH=${SECONDS_EACH:-10}
WARMUP=${WARMUP:-2}
if [ -z "${WORK:-}" ]; then
    # A scratch directory of our own is removed at the end (each run
    # leaves hundreds of MiB of node and etcd data).
    WORK=$(mktemp -d /tmp/fusebox-vs-etcd.XXXXXX)
    OWN_WORK=1
fi
BASE=${BASE_PORT:-27600}
source "$(dirname "$0")/lib/cluster.sh"
if [ -n "${OWN_WORK:-}" ]; then
    trap 'stop_all; rm -rf "$WORK"' EXIT
fi

command -v etcd >/dev/null || { echo "etcd is not on PATH (apt-get install etcd-server)" >&2; exit 2; }

echo "== fusebox: 3 nodes, data in $WORK/fusebox"
start_fusebox "$FUSEBOX" "$WORK/fusebox" "$BASE"
read -r -a TRANSPORTS <<< "${TRANSPORTS:-pipeline}"
for clients in "${COUNTS[@]}"; do
    for transport in "${TRANSPORTS[@]}"; do
        "$FUSEBOX" bench ledger --endpoints "$ENDPOINTS" --clients "$clients" \
            --transport "$transport" \
            --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS" 2>/dev/null
    done
done
stop_all

echo "== etcd $(etcd --version | head -1 | awk '{print $3}'): 3 nodes, data in $WORK/etcd"
CLUSTER=""
for id in 1 2 3; do
    CLUSTER+="e$id=http://127.0.0.1:$((BASE + 10 * id + 1)),"
done
CLUSTER=${CLUSTER%,}
for id in 1 2 3; do
    etcd --name "e$id" --data-dir "$WORK/etcd/$id" \
        --listen-client-urls "http://127.0.0.1:$((BASE + 10 * id))" \
        --advertise-client-urls "http://127.0.0.1:$((BASE + 10 * id))" \
        --listen-peer-urls "http://127.0.0.1:$((BASE + 10 * id + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((BASE + 10 * id + 1))" \
        --initial-cluster "$CLUSTER" --initial-cluster-state new \
        > "$WORK/etcd-$id.log" 2>&1 &
    PIDS+=($!)
done
ETCD="127.0.0.1:$((BASE + 10)),127.0.0.1:$((BASE + 20)),127.0.0.1:$((BASE + 30))"
for _ in $(seq 1 60); do
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD" endpoint health >/dev/null 2>&1 && break
    sleep 0.5
done
for clients in "${COUNTS[@]}"; do
    "$FUSEBOX" bench etcd-ledger --etcd "$ETCD" --clients "$clients" \
        --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" 2>/dev/null
done
