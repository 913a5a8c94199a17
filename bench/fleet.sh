#!/usr/bin/env bash
# Fleet-scale figures of one build on this machine, in one sitting: outcome
# ingestion, breaker propagation to many watch streams and the SDK's gate,
# against a 3-node cluster with fsync on (the ledger pair: bench/vs-etcd.sh).
#
#   bench/fleet.sh [FUSEBOX_BINARY]
#   bench/fleet.sh target/release/fusebox
#
# Environment: SECONDS_EACH (default 10), WARMUP (2), ROUNDS (propagation
# rounds, 30), WATCHERS (the large propagation run, 1000), WORK (a scratch
# directory, default a new one under /tmp), BASE_PORT (28600).
set -euo pipefail

FUSEBOX=${1:-target/release/fusebox}
SECONDS_EACH=${SECONDS_EACH:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-30}
WATCHERS=${WATCHERS:-1000}
WORK=${WORK:-$(mktemp -d /tmp/fusebox-fleet.XXXXXX)}
BASE=${BASE_PORT:-28600}
PIDS=()

stop_all() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT

[ -x "$FUSEBOX" ] || { echo "no fusebox binary at $FUSEBOX (cargo build --release -p fusebox-cli)" >&2; exit 2; }

echo "== fusebox: 3 nodes, data in $WORK"
PEERS="1=127.0.0.1:$((BASE + 1)),2=127.0.0.1:$((BASE + 2)),3=127.0.0.1:$((BASE + 3))"
for id in 1 2 3; do
    "$FUSEBOX" serve --id "$id" --listen "127.0.0.1:$((BASE + id))" --peers "$PEERS" \
        --data "$WORK/$id" --http "127.0.0.1:$((BASE + 80 + id))" \
        > "$WORK/fusebox-$id.log" 2>&1 &
    PIDS+=($!)
done
ENDPOINTS="127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 3))"
METRICS="127.0.0.1:$((BASE + 81)),127.0.0.1:$((BASE + 82)),127.0.0.1:$((BASE + 83))"
for _ in $(seq 1 60); do
    "$FUSEBOX" cluster status --endpoints "$ENDPOINTS" --json 2>/dev/null | grep -q '"leader_id":[1-9]' && break
    sleep 0.5
done
run() {
    echo "\$ fusebox bench $*"
    "$FUSEBOX" bench --endpoints "$ENDPOINTS" "$@" 2>/dev/null
}
run outcomes --clients 16 --batch 100 --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS"
run propagation --watchers 16 --rounds "$ROUNDS" --change force-open --metrics "$METRICS"
run propagation --watchers 16 --rounds "$ROUNDS" --change trip --metrics "$METRICS"
run propagation --watchers "$WATCHERS" --rounds "$ROUNDS" --change force-open --metrics "$METRICS"
run propagation --watchers "$WATCHERS" --rounds "$ROUNDS" --change trip --metrics "$METRICS"
run gate --threads 1 --seconds "$SECONDS_EACH"
