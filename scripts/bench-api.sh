#!/usr/bin/env bash
# The node agent's requests to the API server at 5,000 Nodes (or $1) on the stub, before
# (main at c5568e7, built in a temporary worktree) and after, in the same run
# (agent/examples/bench-api.rs; figures in BENCHMARKS.md).
#
#   scripts/bench-api.sh [NODES] [BEFORE_COMMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-5000}
BEFORE=${2:-c5568e7}
target=$(realpath "${CARGO_TARGET_DIR:-target}")
tmp=$(mktemp -d)
worktree=$tmp/api-before
cleanup() {
    git worktree remove --force "$worktree" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add -q --detach "$worktree" "$BEFORE"
# The same target dir: the dependencies are built once; the binary is copied out at once.
(cd "$worktree" && CARGO_TARGET_DIR=$target cargo build -q -p cni-install --bin cni-install)
cp "$target/debug/cni-install" "$tmp/cni-install-before"
cargo build -q -p cni-rs-agent --bin cni-rs-agent --example bench-api
NODES=$NODES "$target/debug/examples/bench-api" \
    before="$tmp/cni-install-before" after="$target/debug/cni-rs-agent"
