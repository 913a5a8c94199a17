# What the bench scripts share: a 3-node Fusebox cluster on loopback, and
# stopping every process a script started. Source it, then:
#
#   start_fusebox BINARY DATA_DIR BASE_PORT   # sets ENDPOINTS and METRICS
#   stop_all                                  # also run on exit
#
# Node N listens on BASE_PORT+N (gRPC) and BASE_PORT+80+N (metrics), keeps
# its data in DATA_DIR/N, its config in DATA_DIR/fusebox-N.toml and logs to
# DATA_DIR/fusebox-N.log.
#
# Every bench client calls from 127.0.0.1, so a node meters them all as one
# caller; a fleet calls from many addresses. The nodes' per-caller rate is
# raised to CALLER_REQUESTS_PER_SECOND (default 1,000,000; the node's own
# default is 20,000) so that the clients' sum is not what a run measures.

PIDS=()

stop_all() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT

start_fusebox() {
    local fusebox=$1 data=$2 base=$3 id
    [ -x "$fusebox" ] || { echo "no fusebox binary at $fusebox (cargo build --release -p fusebox-cli)" >&2; exit 2; }
    local rate=${CALLER_REQUESTS_PER_SECOND:-1000000}
    mkdir -p "$data"
    for id in 1 2 3; do
        cat > "$data/fusebox-$id.toml" <<EOF
id = $id
listen = "127.0.0.1:$((base + id))"
data_dir = "$data/$id"

[peers]
1 = "127.0.0.1:$((base + 1))"
2 = "127.0.0.1:$((base + 2))"
3 = "127.0.0.1:$((base + 3))"

[caller_limits]
requests_per_second = $rate
burst = $((2 * rate))
watch_streams = 4096
EOF
        "$fusebox" serve --config "$data/fusebox-$id.toml" --http "127.0.0.1:$((base + 80 + id))" \
            > "$data/fusebox-$id.log" 2>&1 &
        PIDS+=($!)
    done
    ENDPOINTS="127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
    METRICS="127.0.0.1:$((base + 81)),127.0.0.1:$((base + 82)),127.0.0.1:$((base + 83))"
    # Ready when every node names the same leader in the same term: at a
    # cluster's birth one node may name a leader while the others are still
    # electing (seen: node 1 naming node 2 for about a second in which nodes
    # 2 and 3 knew no leader, until a second election), and a bench started
    # then counts calls refused with "no leader is known".
    local views view
    for _ in $(seq 1 60); do
        views=""
        for id in 1 2 3; do
            view=$("$fusebox" cluster status --endpoints "127.0.0.1:$((base + id))" --json 2>/dev/null \
                | grep -o '"leader_id":[1-9][0-9]*\|"term":[0-9]*' | sort | tr '\n' ' ') || view=""
            views+="${view:-none}"$'\n'
        done
        if [ "$(sort -u <<< "$views" | grep -c .)" -eq 1 ] && grep -q leader_id <<< "$views"; then
            return 0
        fi
        sleep 0.5
    done
    echo "the cluster's nodes did not agree on a leader in 30 s; logs in $data" >&2
    exit 1
}
