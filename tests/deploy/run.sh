#!/usr/bin/env bash
# The deploy test: the shipped Compose cluster (deploy/compose) under faults
# with a client container's load running (compose_faults.py says which), on
# an image built by deploy/Dockerfile around the fusebox binary this test
# run built, so RocksDB is not compiled a second time.
#
# Needs root, for Docker. What a fresh Debian machine lacks is installed
# from Debian's packages (Docker Engine, Compose v1, debootstrap); dockerd is
# started if it is not running, and stopped again at the end. With no
# registry to pull from, the Dockerfile's default runtime base
# (debian:bookworm-slim) is made with debootstrap and `docker import`.
#
# Usage: tests/deploy/run.sh [FUSEBOX_BINARY]
#   (default: the debug build in $CARGO_TARGET_DIR, built if missing)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

log() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "the deploy test needs root (it runs Docker); skip it with FUSEBOX_SKIP_DEPLOY_TEST=1" >&2
    exit 1
fi

bin=${1:-${CARGO_TARGET_DIR:-$root/target}/debug/fusebox}
if [ ! -x "$bin" ]; then
    log "building the fusebox binary"
    cargo build -p fusebox-cli --locked
fi

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v objcopy >/dev/null || missing+=(binutils)
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

started_dockerd=""
stop_dockerd() {
    if [ -n "$started_dockerd" ]; then
        kill "$started_dockerd" 2>/dev/null || true
        wait "$started_dockerd" 2>/dev/null || true
    fi
}
trap stop_dockerd EXIT
if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    dockerd >/tmp/fusebox-deploy-dockerd.log 2>&1 &
    started_dockerd=$!
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { tail -20 /tmp/fusebox-deploy-dockerd.log; exit 1; }
fi

base=debian:bookworm-slim
if ! docker image inspect "$base" >/dev/null 2>&1; then
    log "making $base with debootstrap (no registry here)"
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/tmp/fusebox-debootstrap.log 2>&1 \
        || { tail -20 /tmp/fusebox-debootstrap.log; exit 1; }
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    rm -rf "$rootfs"
fi

log "building the image from $bin (deploy/Dockerfile, target prebuilt)"
context=$(mktemp -d)
objcopy --strip-debug "$bin" "$context/fusebox"
docker build -q -f deploy/Dockerfile --target prebuilt -t fusebox:deploy-test "$context"
rm -rf "$context"

log "the Compose cluster under faults"
python3 tests/deploy/compose_faults.py --image fusebox:deploy-test --cli "$bin"
