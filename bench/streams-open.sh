#!/usr/bin/env bash
# Whether writes slow down while many watch streams are open: the ledger
# pair, outcome reports, and breaker changes that publish watch events (an
# operator's force-open, watched by 16 streams of the writes' namespace),
# on a fresh 3-node cluster per run, alternately with no other watch stream
# and with WATCHERS idle ones (in a namespace of their own, so no write of
# the runs is theirs).
#
#   bench/streams-open.sh [FUSEBOX_BINARY]
#   bench/streams-open.sh target/release/fusebox
#
# Environment: PAIRS (runs of each kind, default 2), WATCHERS (1000),
# SECONDS_EACH (10), WARMUP (2), ROUNDS (force-opens, 100), WORK (a scratch
# directory, default a new one under /tmp), BASE_PORT (28700).
set -euo pipefail

FUSEBOX=${1:-target/release/fusebox}
PAIRS=${PAIRS:-2}
WATCHERS=${WATCHERS:-1000}
SECONDS_EACH=${SECONDS_EACH:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-100}
WORK=${WORK:-$(mktemp -d /tmp/fusebox-streams.XXXXXX)}
BASE=${BASE_PORT:-28700}
# The streams stay open through all three runs (a bench holds them at most
# 60 s); a force-open round takes about 0.1 s.
HOLD=$((2 * (SECONDS_EACH + WARMUP) + ROUNDS / 10 + 20))
[ "$HOLD" -le 60 ] || { echo "2 × (SECONDS_EACH + WARMUP) + ROUNDS / 10 must be at most 40" >&2; exit 2; }
source "$(dirname "$0")/lib/cluster.sh"

# Run `$1` on a fresh cluster with `$2` idle streams open throughout.
run() {
    local streams=$2 data="$WORK/run-$1" holder=""
    echo "== $streams watch streams open"
    start_fusebox "$FUSEBOX" "$data" "$BASE"
    if [ "$streams" -gt 0 ]; then
        # One change, then the streams stay open (and idle) for the pause.
        "$FUSEBOX" bench --endpoints "$ENDPOINTS" propagation --watchers "$streams" \
            --rounds 1 --pause-ms $((HOLD * 1000)) --namespace idle \
            > "$data/streams.log" 2>&1 &
        holder=$!
        PIDS+=("$holder")
        for _ in $(seq 1 60); do
            grep -q "watch streams open" "$data/streams.log" && break
            sleep 0.5
        done
        grep -q "watch streams open" "$data/streams.log" \
            || { echo "the streams did not open; see $data/streams.log" >&2; exit 1; }
        sleep 2
    fi
    "$FUSEBOX" bench --endpoints "$ENDPOINTS" ledger --clients 64 \
        --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS" 2>/dev/null
    "$FUSEBOX" bench --endpoints "$ENDPOINTS" outcomes --clients 16 --batch 100 \
        --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP" --metrics "$METRICS" 2>/dev/null
    "$FUSEBOX" bench --endpoints "$ENDPOINTS" propagation --watchers 16 --rounds "$ROUNDS" \
        --metrics "$METRICS" 2>/dev/null
    if [ -n "$holder" ] && ! kill -0 "$holder" 2>/dev/null; then
        echo "the idle streams closed before the run ended; see $data/streams.log" >&2
        exit 1
    fi
    stop_all
    # The nodes' data (hundreds of MiB a run) goes now, so that writing it
    # back does not load the next run; the logs stay.
    rm -rf "$data"/1 "$data"/2 "$data"/3
}

# Each pair runs in the other order from the last, so that a drift over
# the sitting does not pass for a cost of the streams.
for pair in $(seq 1 "$PAIRS"); do
    if [ $((pair % 2)) -eq 1 ]; then
        run "$pair-none" 0
        run "$pair-streams" "$WATCHERS"
    else
        run "$pair-streams" "$WATCHERS"
        run "$pair-none" 0
    fi
done
