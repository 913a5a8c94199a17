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
source "$(dirname "$0")/lib/cluster.sh"

echo "== fusebox: 3 nodes, data in $WORK"
start_fusebox "$FUSEBOX" "$WORK" "$BASE"
run() {
    echo "\$ fusebox bench $*"
    "$FUSEBOX" bench --endpoints "$ENDPOINTS" "$@" 2>/dev/null
}
run outcomes --clients 16 --batch 100 --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS"
run outcomes --clients 16 --batch 512 --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS"
run propagation --watchers 16 --rounds "$ROUNDS" --change force-open --metrics "$METRICS"
run propagation --watchers 16 --rounds "$ROUNDS" --change trip --metrics "$METRICS"
run propagation --watchers "$WATCHERS" --rounds "$ROUNDS" --change force-open --metrics "$METRICS"
run propagation --watchers "$WATCHERS" --rounds "$ROUNDS" --change trip --metrics "$METRICS"
run gate --threads 1 --seconds "$SECONDS_EACH"
