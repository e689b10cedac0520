#!/usr/bin/env bash
# Static (musl) release build of the whole suite: the plugins, cnitool and cni-rs-agent.
# Output: target/x86_64-unknown-linux-musl/release/ (under $CARGO_TARGET_DIR when set).
# `file` reports "statically linked"; the binaries run on any x86_64 Linux, with or without
# glibc.
#
# ring (rustls' crypto, used by cni-rs-agent) and jemalloc (its allocator) compile C: that
# needs musl-gcc, from Debian's musl-tools, and make (installed here when missing and
# running as root).
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
# shellcheck source=scripts/packages.sh
source scripts/packages.sh
need_packages "the static build" musl-gcc:musl-tools make:make

CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --workspace --bins --target "$target"

out=${CARGO_TARGET_DIR:-target}/$target/release
for bin in "$out"/bridge "$out"/host-local "$out"/loopback "$out"/portmap "$out"/cnitool "$out"/cni-rs-agent; do
    [[ -e $bin ]] || continue
    if ! file "$bin" | grep -Eq 'statically linked|static-pie linked'; then
        echo "build-static: $bin is not statically linked: $(file -b "$bin")" >&2
        exit 1
    fi
done
ls -l "$out"/{bridge,host-local,loopback,portmap,cnitool,cni-rs-agent} 2>/dev/null || true
