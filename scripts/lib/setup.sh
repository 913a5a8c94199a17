# What scripts/serve and scripts/test share: checks for Rust, and installs
# Debian packages that are missing (with sudo when not root).

# Stops with a clear message if cargo is missing or older than the
# workspace's rust-version.
need_rust() {
    if ! command -v cargo >/dev/null; then
        echo "Rust is not installed: get it from https://rustup.rs, then run this again" >&2
        exit 1
    fi
    local want have
    want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
    have=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
        echo "Rust $have is older than the $want this workspace needs: rustup update" >&2
        exit 1
    fi
}

# Installs each named Debian package that is not installed yet.
need_debian_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    if ! command -v apt-get >/dev/null; then
        echo "missing ${missing[*]} (or your system's equivalent): install them, then run this again" >&2
        exit 1
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "==> installing ${missing[*]}"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
