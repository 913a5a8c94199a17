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
#   ROUNDS=3 SECONDS_EACH=30 bench/vs-etcd.sh target/release/fusebox 64
#
# Environment: SECONDS_EACH (default 10), WARMUP (2), WORK (a scratch
# directory, default a new one under /tmp), BASE_PORT (27600), TRANSPORTS
# (how Fusebox's calls travel, each measured in turn at every client count:
# default "pipeline"; "unary pipeline" measures both), ROUNDS (default 1).
#
# A shared machine drifts in speed over minutes, and the two stores are
# measured minutes apart, so one ratio can be off by the drift. ROUNDS=N
# measures each store N times on fresh clusters, alternating which goes
# first (Fusebox first in odd rounds, etcd first in even ones), and ends
# with each round's ratio at each client count and their median.
set -euo pipefail

FUSEBOX=${1:-target/release/fusebox}
shift || true
COUNTS=("${@:-1 64 256}")
read -r -a COUNTS <<< "${COUNTS[*]}"
SECONDS_EACH=${SECONDS_EACH:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-1}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive whole number, not '$ROUNDS'" >&2; exit 2; }
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
read -r -a TRANSPORTS <<< "${TRANSPORTS:-pipeline}"

# keys/s of every run: "store clients round" -> keys/s (Fusebox's first
# transport only, the one the ratio compares).
declare -A RATE

# Runs one bench command, shows its output, and notes its keys/s under $1.
bench() {
    local key=$1 out
    shift
    out=$("$@" 2>/dev/null)
    echo "$out"
    if [ -z "${RATE[$key]:-}" ]; then
        RATE[$key]=$(grep -o '[0-9]* keys/s' <<< "$out" | head -1 | cut -d' ' -f1)
    fi
}

# Data of a round, removed after it when the scratch directory is ours.
data_dir() {
    if [ "$ROUNDS" -eq 1 ]; then echo "$WORK/$1"; else echo "$WORK/$1-round-$2"; fi
}
done_with() {
    if [ -n "${OWN_WORK:-}" ] && [ "$ROUNDS" -gt 1 ]; then rm -rf "$1"; fi
}

run_fusebox() {
    local round=$1 data
    data=$(data_dir fusebox "$round")
    echo "== fusebox: 3 nodes, data in $data"
    start_fusebox "$FUSEBOX" "$data" "$BASE"
    for clients in "${COUNTS[@]}"; do
        for transport in "${TRANSPORTS[@]}"; do
            bench "fusebox $clients $round" \
                "$FUSEBOX" bench ledger --endpoints "$ENDPOINTS" --clients "$clients" \
                --transport "$transport" \
                --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS"
        done
    done
    stop_all
    done_with "$data"
}

run_etcd() {
    local round=$1 data cluster="" etcd_endpoints
    data=$(data_dir etcd "$round")
    echo "== etcd $(etcd --version | head -1 | awk '{print $3}'): 3 nodes, data in $data"
    for id in 1 2 3; do
        cluster+="e$id=http://127.0.0.1:$((BASE + 10 * id + 1)),"
    done
    cluster=${cluster%,}
    for id in 1 2 3; do
        etcd --name "e$id" --data-dir "$data/$id" \
            --listen-client-urls "http://127.0.0.1:$((BASE + 10 * id))" \
            --advertise-client-urls "http://127.0.0.1:$((BASE + 10 * id))" \
            --listen-peer-urls "http://127.0.0.1:$((BASE + 10 * id + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((BASE + 10 * id + 1))" \
            --initial-cluster "$cluster" --initial-cluster-state new \
            > "$WORK/etcd-$id.log" 2>&1 &
        PIDS+=($!)
    done
    etcd_endpoints="127.0.0.1:$((BASE + 10)),127.0.0.1:$((BASE + 20)),127.0.0.1:$((BASE + 30))"
    for _ in $(seq 1 60); do
        ETCDCTL_API=3 etcdctl --endpoints "$etcd_endpoints" endpoint health >/dev/null 2>&1 && break
        sleep 0.5
    done
    for clients in "${COUNTS[@]}"; do
        bench "etcd $clients $round" \
            "$FUSEBOX" bench etcd-ledger --etcd "$etcd_endpoints" --clients "$clients" \
            --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP"
    done
    stop_all
    done_with "$data"
}

for round in $(seq 1 "$ROUNDS"); do
    [ "$ROUNDS" -gt 1 ] && echo "== round $round of $ROUNDS"
    if [ $((round % 2)) -eq 1 ]; then
        run_fusebox "$round"
        run_etcd "$round"
    else
        run_etcd "$round"
        run_fusebox "$round"
    fi
done

[ "$ROUNDS" -gt 1 ] || exit 0
echo "== Fusebox's keys/s over etcd's, round by round"
for clients in "${COUNTS[@]}"; do
    ratios=()
    for round in $(seq 1 "$ROUNDS"); do
        ratios+=("$(awk -v f="${RATE[fusebox $clients $round]:-0}" -v e="${RATE[etcd $clients $round]:-0}" \
            'BEGIN { if (e > 0) printf "%.2f", f / e; else print "n/a" }')")
    done
    median=$(printf '%s\n' "${ratios[@]}" | grep -v n/a | sort -g \
        | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    echo "  $clients clients: ${ratios[*]} (median $median)"
done
