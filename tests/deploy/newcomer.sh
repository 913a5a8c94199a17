#!/usr/bin/env bash
# The README's front door as a newcomer meets it: a clean clone of this
# repository in a fresh container made from the debootstrap base image
# (debian:bookworm-slim, as tests/deploy/run.sh makes it), with nothing
# installed by hand, runs `scripts/serve`; the test passes once the node it
# serves answers /readyz.
#
# (dash, the image's sh, has no /dev/tcp: the readiness check uses bash.)
#
# The one thing the container is given is this machine's Rust toolchain
# (mounted read-only), standing in for a newcomer's rustup install: these
# machines reach crates.io but not rustup's download site.
#
# Not run by scripts/test: the release build inside the container compiles
# RocksDB from nothing, 20 to 30 minutes on two cores.
#
# Usage: tests/deploy/newcomer.sh   (root, Docker running, base image made)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
name=fusebox-newcomer
clone=$(mktemp -d)
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$clone"' EXIT

git clone -q "$root" "$clone/fusebox"
docker rm -f "$name" >/dev/null 2>&1 || true
# This machine reaches crates.io through a proxy whose CA only the host
# trusts: hand the host's CA bundle to cargo in the container, as a
# newcomer's own machine would trust its network. Nothing is installed.
trust=()
if [ -n "${SSL_CERT_FILE:-}" ] && [ -r "$SSL_CERT_FILE" ]; then
    trust=(-v "$SSL_CERT_FILE:/opt/host-ca.pem:ro" -e CARGO_HTTP_CAINFO=/opt/host-ca.pem)
fi
docker run -d --name "$name" "${trust[@]}" \
    -v "$clone/fusebox:/home/newcomer/fusebox" \
    -v "$rustup_home:/opt/rustup:ro" -v "$cargo_bin:/opt/cargo-bin:ro" \
    -e RUSTUP_HOME=/opt/rustup -e PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -w /home/newcomer/fusebox debian:bookworm-slim scripts/serve >/dev/null
started=$(date +%s)
echo "scripts/serve is running in a fresh container (a release build from nothing: 20-30 minutes)"
while :; do
    if ! docker inspect -f '{{.State.Running}}' "$name" | grep -q true; then
        docker logs --tail 40 "$name"
        echo "FAILED: scripts/serve exited"
        exit 1
    fi
    if docker exec "$name" bash -c 'exec 3<>/dev/tcp/127.0.0.1/7680 && printf "GET /readyz HTTP/1.0\r\n\r\n" >&3 && grep -q "^ready" <&3' 2>/dev/null; then
        echo "the node serves: /readyz answered ready $(( $(date +%s) - started )) s after scripts/serve started"
        docker logs --tail 3 "$name"
        exit 0
    fi
    if (( $(date +%s) - started > 3600 )); then
        docker logs --tail 40 "$name"
        echo "FAILED: not serving within an hour"
        exit 1
    fi
    sleep 10
done
