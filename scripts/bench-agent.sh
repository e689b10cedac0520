#!/usr/bin/env bash
# Scale benchmark of the node agent (issue 20): 5,000 Nodes (or $1) from the stub API
# server (its own process), the agent in-process (agent/examples/bench-agent.rs), on
# hostnet's fake kernel and, as root, on the real kernel in a throwaway namespace. Each
# round prints the list's time, the first full reconcile (and its pass alone), the time
# from one added and one deleted Node to the end of the pass that put its routes in place,
# the changes per event (fake kernel) and the agent's peak RSS; then the medians of ROUNDS
# rounds (default 3). Figures in BENCHMARKS.md.
#
#   scripts/bench-agent.sh [NODES] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-5000}
ROUNDS=${2:-3}
cargo build -q --release -p cni-rs-agent --example stub-apiserver --example bench-agent
bench=${CARGO_TARGET_DIR:-target}/release/examples/bench-agent
log=$(mktemp /tmp/cnirs-bench-agent.XXXXXX)
trap 'rm -f "$log"' EXIT
modes=(fake)
if [[ $EUID -eq 0 ]]; then modes+=(kernel); else echo "not root: the fake kernel only"; fi
for mode in "${modes[@]}"; do
    flag=()
    [[ $mode == kernel ]] && flag=(--kernel)
    summaries=()
    for ((r = 1; r <= ROUNDS; r++)); do
        echo "== $mode kernel, round $r"
        # The agent's log to a file: shown when a round fails, instead of lost.
        if ! out=$("$bench" "$NODES" "${flag[@]}" 2>"$log"); then
            echo "bench-agent failed ($mode kernel, round $r):" >&2
            tail -20 "$log" >&2
            exit 1
        fi
        grep -v '^summary ' <<<"$out"
        summaries+=("$(grep '^summary ' <<<"$out")")
    done
    echo "== $mode kernel: medians of $ROUNDS rounds"
    printf '%s\n' "${summaries[@]}" | python3 -c '
import statistics, sys
rows = [dict(kv.split("=") for kv in line.split()[1:]) for line in sys.stdin if line.strip()]
for key in rows[0]:
    print(f"  {key}: {statistics.median(float(r[key]) for r in rows):g}")
'
done
