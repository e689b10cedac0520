#!/usr/bin/env bash
# NetworkPolicy scale benchmark (issue 29): the stub API server (its own process) serves
# NODES nodes, PODS pods in NAMESPACES namespaces and POLICIES_PER_NS policies in each;
# the agent runs in-process (agent/examples/bench-netpol.rs) on the real kernel of a
# throwaway namespace. Each run prints the first full programming (agent start to
# netpol in place), the agent's peak RSS, and per event kind (pods on this node and
# remote, policies, a namespace) the medians over ROUNDS events from the stub's command
# to the agent's transaction committed; then the medians of RUNS runs. Root only.
#
#   [TARGET=x86_64-unknown-linux-musl] scripts/bench-netpol.sh [NODES] [PODS] [NAMESPACES] [POLICIES_PER_NS] [RUNS] [ROUNDS]
#   (default 5000 150000 1000 10 3 11; a smoke run: 50 1500 10 10 1 3)
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-5000}
PODS=${2:-150000}
NAMESPACES=${3:-1000}
PER_NS=${4:-10}
RUNS=${5:-3}
ROUNDS=${6:-11}
[[ $EUID -eq 0 ]] || { echo "error: needs root (the real kernel, in a namespace)" >&2; exit 1; }
# TARGET=x86_64-unknown-linux-musl measures with the allocator the image ships (musl's:
# slower, and it gives freed memory back where glibc's keeps it); default the host's.
out=${CARGO_TARGET_DIR:-target}/release
target_args=()
if [[ -n ${TARGET:-} ]]; then
    rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
    # shellcheck source=scripts/packages.sh
    source scripts/packages.sh
    need_packages "a musl build" musl-gcc:musl-tools make:make
    out=${CARGO_TARGET_DIR:-target}/$TARGET/release
    target_args=(--target "$TARGET")
fi
CC_x86_64_unknown_linux_musl=musl-gcc cargo build -q --release "${target_args[@]}" \
    -p cni-rs-agent --example stub-apiserver --example bench-netpol
bench=$out/examples/bench-netpol
log=$(mktemp /tmp/cnirs-bench-netpol.XXXXXX)
trap 'rm -f "$log"' EXIT
summaries=()
for ((r = 1; r <= RUNS; r++)); do
    echo "== run $r"
    # The agent's log to a file: shown when a run fails, instead of lost.
    if ! out=$("$bench" --nodes "$NODES" --pods "$PODS" --namespaces "$NAMESPACES" \
        --policies-per-ns "$PER_NS" --rounds "$ROUNDS" 2>"$log"); then
        echo "bench-netpol failed (run $r):" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    grep -v '^summary ' <<<"$out"
    summaries+=("$(grep '^summary ' <<<"$out")")
done
echo "== medians of $RUNS runs"
printf '%s\n' "${summaries[@]}" | python3 -c '
import statistics, sys
rows = [dict(kv.split("=") for kv in line.split()[1:]) for line in sys.stdin if line.strip()]
for key in rows[0]:
    print(f"  {key}: {statistics.median(float(r[key]) for r in rows):g}")
'
