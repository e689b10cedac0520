#!/usr/bin/env bash
# Fuzzes every target in fuzz/ for SECONDS each (default 60): bridge-independent parsers
# of libcni and skel today (see cni_tests::fuzz::TARGETS). Installs the nightly toolchain
# and cargo-fuzz when missing. No panic, no hang (10 s per input), no allocation over
# 256 MB, no more than 1 GB of memory. A crash leaves its input under
# fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/ (then `cargo test`
# replays it forever) and fix the cause.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "installing the nightly toolchain (cargo fuzz needs it)" >&2
    rustup toolchain install nightly --profile minimal >/dev/null
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked --quiet
fi

cd fuzz
targets=("$@")
((${#targets[@]})) || mapfile -t targets < <(cargo +nightly fuzz list)
cargo +nightly fuzz build
status=0
for t in "${targets[@]}"; do
    corpus=corpus/$t
    mkdir -p "$corpus"
    log=$(mktemp)
    if cargo +nightly fuzz run "$t" "$corpus" "seeds/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=256 \
        -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        echo "fuzz $t: ${seconds}s, $runs inputs, no crash"
    else
        status=1
        echo "fuzz $t: FAILED" >&2
        grep -E 'panicked|ERROR|SUMMARY|Test unit written|artifact' "$log" | head -20 >&2
    fi
    rm -f "$log"
done
exit "$status"
