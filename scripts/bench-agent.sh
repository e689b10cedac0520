#!/usr/bin/env bash
# Scale benchmark of the node agent (issue 20): 5,000 Nodes (or $1) from the stub API
# server; the agent in-process on hostnet's fake kernel. Prints the first full reconcile's
# time, the time from one added and one deleted Node to its routes, the changes per event
# (one per changed route, plus the firewall table whose pod-range set changed) and the
# agent's peak RSS. No root needed; figures in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p cni-install --example stub-apiserver --example bench-agent
exec target/release/examples/bench-agent "${1:-5000}"
