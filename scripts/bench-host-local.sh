#!/usr/bin/env bash
# Benchmark host-local ADD and DEL, ours against the Go reference, on an empty store and
# on a store already holding FILL allocations (default 60,000 in a /16). Prints the median
# wall time of RUNS ADD/DEL pairs per plugin, in milliseconds, process start included.
#
#   scripts/bench-host-local.sh            # RUNS=7 FILL=60000
#   RUNS=11 FILL=20000 scripts/bench-host-local.sh
#
# Everything happens in a temp dir; nothing touches /var/lib/cni.
set -euo pipefail

RUNS=${RUNS:-7}
FILL=${FILL:-60000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
GO=${GO_HOST_LOCAL:-/usr/lib/cni/host-local}
source "$ROOT/scripts/lib.sh"

cargo build --quiet --release -p host-local --manifest-path "$ROOT/Cargo.toml" >&2
OURS=$TARGET/release/host-local
[[ -x $GO ]] || { echo "Go host-local not found at $GO (apt-get install containernetworking-plugins)" >&2; exit 1; }

make_work bench-host-local

# conf <dataDir>: a config file for the bench network (cniVersion 1.0.0: the Go v1.1.1 maximum)
conf() {
    printf '{"cniVersion":"1.0.0","name":"bench","type":"bridge","ipam":{"type":"host-local","dataDir":"%s","ranges":[[{"subnet":"10.20.0.0/16"}]]}}' \
        "$1" >"$1.json"
}

# fill <dataDir> <n>: n leases in the Go format, as a busy node would have them
fill() {
    local dir=$1/bench n=$2 i=0 a b ip=""
    mkdir -p "$dir"
    for ((a = 0; a < 256 && i < n; a++)); do
        for ((b = 0; b < 256 && i < n; b++)); do
            ((a == 0 && b < 2)) && continue # network and gateway
            ip=10.20.$a.$b
            printf '%064x\r\neth0' "$i" >"$dir/$ip"
            i=$((i + 1))
        done
    done
    [[ -n $ip ]] && printf '%s' "$ip" >"$dir/last_reserved_ip.0"
    return 0
}

# run <bin> <cmd> <id> <dataDir>: prints the call's wall time in microseconds
run() {
    local bin=$1 cmd=$2 id=$3 dir=$4 t0 t1
    t0=$EPOCHREALTIME
    if ! CNI_COMMAND=$cmd CNI_CONTAINERID=$id CNI_NETNS=/var/run/netns/bench-absent \
        CNI_IFNAME=eth0 CNI_PATH=/nonexistent "$bin" <"$dir.json" >"$WORK/out" 2>&1; then
        echo "$bin $cmd $id failed: $(cat "$WORK/out")" >&2
        exit 1
    fi
    t1=$EPOCHREALTIME
    echo $((10#${t1/./} - 10#${t0/./}))
}

# bench <bin> <dataDir>: "<ADD median> <DEL median>"
bench() {
    local bin=$1 dir=$2 k adds=() dels=()
    # warm-up pair, not counted (our first call after someone else's change rebuilds the index)
    run "$bin" ADD warmup "$dir" >/dev/null
    run "$bin" DEL warmup "$dir" >/dev/null
    for ((k = 0; k < RUNS; k++)); do
        adds+=("$(run "$bin" ADD "bench-$k" "$dir")")
        dels+=("$(run "$bin" DEL "bench-$k" "$dir")")
    done
    echo "$(printf '%s\n' "${adds[@]}" | median_ms) $(printf '%s\n' "${dels[@]}" | median_ms)"
}

for who in go rs; do
    for size in empty full; do
        d=$WORK/$who-$size
        mkdir -p "$d"
        conf "$d"
    done
done
echo "filling two stores with $FILL leases..." >&2
fill "$WORK/go-full" "$FILL"
cp -a "$WORK/go-full/bench" "$WORK/rs-full/"

# Our first call on a store written by someone else: a full scan that builds the index.
cold=$(run "$OURS" ADD cold "$WORK/rs-full")
run "$OURS" DEL cold "$WORK/rs-full" >/dev/null

read -r go_e_add go_e_del < <(bench "$GO" "$WORK/go-empty")
read -r rs_e_add rs_e_del < <(bench "$OURS" "$WORK/rs-empty")
read -r go_f_add go_f_del < <(bench "$GO" "$WORK/go-full")
read -r rs_f_add rs_f_del < <(bench "$OURS" "$WORK/rs-full")

printf '\nhost-local, median of %d runs, ms (process start included)\n' "$RUNS"
printf '%-18s %10s %10s %14s %14s\n' "" "empty ADD" "empty DEL" "$FILL ADD" "$FILL DEL"
printf '%-18s %10s %10s %14s %14s\n' "Go (reference)" "$go_e_add" "$go_e_del" "$go_f_add" "$go_f_del"
printf '%-18s %10s %10s %14s %14s\n' "Rust (ours)" "$rs_e_add" "$rs_e_del" "$rs_f_add" "$rs_f_del"
awk -v c="$cold" -v n="$FILL" 'BEGIN {printf "Rust first ADD after a foreign change at %d leases (index rebuild): %.1f ms\n", n, c / 1000}'
