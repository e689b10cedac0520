#!/usr/bin/env bash
# Benchmark: the bridge plugin with isDefaultGateway + ipMasq (iptables backend) and
# host-local, ours vs the Go reference (/usr/lib/cni) measured in the same run, in
# throwaway namespaces. Needs root. Prints one table with the ratio ours/reference:
#
#   - ADD, DEL with prevResult: median wall time of one exec (ms), spawned as a runtime
#     does (scripts/plugin-runs.py)
#   - CONC concurrent ADDs, then CONC concurrent DELs: wall time (ms, median of 3 rounds)
#   - the same ADD/DEL with FILL attachments already on the bridge, over the time with
#     none (x): how an operation grows with the number of pods
#   - peak RSS of the bridge process itself, not its children (scripts/peak-rss.py)
#   - binary sizes (ours: the static musl build when its target is installed)
#
#   scripts/bench-bridge.sh [RUNS] [FILL]    (default 30 250; one warm-up run each, not counted)
#   scripts/bench-bridge.sh 3 20             (the short mode scripts/test.sh runs)
#
# It fails when an operation fails or anything is left behind (links, IP reservations,
# rules), never on a figure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUNS=${1:-30}
FILL=${2:-250}
CONC=${CONC:-20}
GO_DIR=/usr/lib/cni
TARGET=${CARGO_TARGET_DIR:-target}

musl=x86_64-unknown-linux-musl
if rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
    cargo build --release -q --target "$musl" -p bridge -p host-local
    OURS_DIR=$TARGET/$musl/release
else
    cargo build --release -q -p bridge -p host-local
    OURS_DIR=$TARGET/release
fi
OURS_DIR=$(cd "$OURS_DIR" && pwd)
PEAK_RSS=$(pwd)/scripts/peak-rss.py
RUNS_PY=$(pwd)/scripts/plugin-runs.py

make_work bench-bridge
HOST_NS=bench-br-h-$$
make_netns "$HOST_NS"
ip -n "$HOST_NS" link set lo up

# CNI_PATH per implementation: bridge + host-local.
mkdir -p "$WORK/ours" "$WORK/go"
ln -s "$OURS_DIR/bridge" "$WORK/ours/bridge"
ln -s "$OURS_DIR/host-local" "$WORK/ours/host-local"
ln -s "$GO_DIR/bridge" "$WORK/go/bridge"
ln -s "$GO_DIR/host-local" "$WORK/go/host-local"

# --- Run inside the host netns (each plugin run is a plain exec, no `ip netns exec`).

# cni VERB ID NETNS IFNAME [PREV]: one plugin run of $IMPL; ADD's result on stdout.
cni() {
    local conf=$CONF
    [[ -n ${5:-} ]] && conf="${CONF%\}},\"prevResult\":$5}"
    CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$3 CNI_IFNAME=$4 \
        CNI_PATH=$WORK/$IMPL ${WRAP:-} "$WORK/$IMPL/bridge" <<<"$conf"
}

# seq_runs TAG NETNS: RUNS+1 sequential ADD, DEL-with-prevResult pairs; prints
# "add_us del_us" for all but the first (a warm-up). Timed by scripts/plugin-runs.py: one
# spawn per run as a runtime does, no shell fork around it.
seq_runs() { python3 "$RUNS_PY" "$WORK/$IMPL" "$CONF" "$1" "$2" "$RUNS"; }

# conc_round NETNS ROUND: CONC ADDs at once, then their CONC DELs at once; prints
# "add_wall_us del_wall_us". Any failed run fails the round.
conc_round() {
    local i t0 t1 t2 pids=() pid
    t0=$EPOCHREALTIME
    for i in $(seq 1 "$CONC"); do
        cni ADD "conc-$2-$i" "$1" "eth$i" >"$WORK/conc-$i.json" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    t1=$EPOCHREALTIME
    pids=()
    for i in $(seq 1 "$CONC"); do
        cni DEL "conc-$2-$i" "$1" "eth$i" "$(<"$WORK/conc-$i.json")" >/dev/null &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    t2=$EPOCHREALTIME
    echo $((${t1/./} - ${t0/./})) $((${t2/./} - ${t1/./}))
}

# fill NETNS / drain NETNS: FILL attachments on the bridge (results kept for their DEL).
fill() {
    local i
    for i in $(seq 1 "$FILL"); do cni ADD "fill-$i" "$1" "eth$i" >"$WORK/fill-$IMPL-$i.json"; done
}
drain() {
    local i
    for i in $(seq 1 "$FILL"); do cni DEL "fill-$i" "$1" "eth$i" "$(<"$WORK/fill-$IMPL-$i.json")" >/dev/null; done
}

# rss NETNS: peak RSS (kB) of the bridge itself in ADD, then in DEL: "add_kb del_kb".
rss() {
    local res
    res=$(WRAP="$PEAK_RSS $WORK/rss-add" cni ADD rss "$1" eth0)
    WRAP="$PEAK_RSS $WORK/rss-del" cni DEL rss "$1" eth0 "$res" >/dev/null
    echo "$(<"$WORK/rss-add") $(<"$WORK/rss-del")"
}

# --- One implementation's whole run, from outside.

in_host() { # FUNCTION ARGS...: runs it in the host netns with the bench's variables
    ip netns exec "$HOST_NS" env IMPL="$IMPL" CONF="$CONF" WORK="$WORK" RUNS="$RUNS" \
        FILL="$FILL" CONC="$CONC" PEAK_RSS="$PEAK_RSS" RUNS_PY="$RUNS_PY" \
        bash -c "set -euo pipefail; $(declare -f cni seq_runs conc_round fill drain rss); \"\$@\"" _ "$@"
}

# Nothing of IMPL's may be left: no veth on the host or link in its containers, no CNI
# rule, no reserved IP.
assert_clean() {
    local veths rules ips links=0 ns
    veths=$(ip -n "$HOST_NS" -o link show type veth | wc -l)
    rules=$(ip netns exec "$HOST_NS" iptables-save -t nat | grep -c 'CNI-' || true)
    ips=$(find "$WORK/data-$IMPL" -type f -name '10.*' 2>/dev/null | wc -l)
    for ns in "$@"; do
        links=$((links + $(ip -n "$ns" -o link show | grep -vc ': lo:' || true)))
    done
    if [[ $veths != 0 || $rules != 0 || $ips != 0 || $links != 0 ]]; then
        echo "LEAK ($IMPL): host veths=$veths rules=$rules ips=$ips container links=$links" >&2
        exit 1
    fi
}

bench_impl() { # IMPL: writes $WORK/IMPL-{base,scale,conc,rss}.txt
    IMPL=$1
    CONF='{"cniVersion":"1.0.0","name":"bench-'$IMPL'","type":"bridge","bridge":"br-'$IMPL'","isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"iptables","ipam":{"type":"host-local","subnet":"10.77.0.0/16","dataDir":"'$WORK/data-$IMPL'"}}'
    local ctr=bench-br-c-$IMPL-$$ many=bench-br-m-$IMPL-$$ round
    make_netns "$ctr"
    make_netns "$many"
    in_host seq_runs base "$ctr" >"$WORK/$IMPL-base.txt"
    in_host rss "$ctr" >"$WORK/$IMPL-rss.txt"
    for round in 1 2 3; do in_host conc_round "$many" "$round"; done >"$WORK/$IMPL-conc.txt"
    assert_clean "$ctr" "$many"
    in_host fill "$many"
    in_host seq_runs scale "$ctr" >"$WORK/$IMPL-scale.txt"
    in_host drain "$many"
    assert_clean "$ctr" "$many"
}

bench_impl ours
bench_impl go

# --- The table.

col() { cut -d' ' -f"$2" "$WORK/$1.txt" | median_ms; } # FILE FIELD: median in ms
ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else printf "-" }'; }
size() { stat -Lc %s "$1" | awk '{printf "%.2f", $1 / 1e6}'; }
linkage() { file -L "$1" | grep -Eq 'statically linked|static-pie' && echo static || echo dynamic; }
row() { printf '%-44s %9s %9s %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

echo "bridge isDefaultGateway + ipMasq (iptables) + host-local; RUNS=$RUNS FILL=$FILL CONC=$CONC"
echo "ours: $OURS_DIR  reference: $GO_DIR ($(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo '?'))"
printf '%-44s %9s %9s %8s\n' figure ours reference ratio
for impl in ours go; do
    declare "${impl}_add=$(col "$impl-base" 1)" "${impl}_del=$(col "$impl-base" 2)"
    declare "${impl}_sadd=$(col "$impl-scale" 1)" "${impl}_sdel=$(col "$impl-scale" 2)"
    declare "${impl}_cadd=$(col "$impl-conc" 1)" "${impl}_cdel=$(col "$impl-conc" 2)"
done
row "ADD, ms" "$ours_add" "$go_add"
row "DEL with prevResult, ms" "$ours_del" "$go_del"
row "$CONC concurrent ADDs, wall ms" "$ours_cadd" "$go_cadd"
row "$CONC concurrent DELs, wall ms" "$ours_cdel" "$go_cdel"
row "ADD with $FILL attachments, ms" "$ours_sadd" "$go_sadd"
row "DEL with $FILL attachments, ms" "$ours_sdel" "$go_sdel"
row "ADD with $FILL / with none, x" "$(ratio "$ours_sadd" "$ours_add")" "$(ratio "$go_sadd" "$go_add")"
row "DEL with $FILL / with none, x" "$(ratio "$ours_sdel" "$ours_del")" "$(ratio "$go_sdel" "$go_del")"
read -r ours_rss_add ours_rss_del <"$WORK/ours-rss.txt"
read -r go_rss_add go_rss_del <"$WORK/go-rss.txt"
row "peak RSS of the bridge itself in ADD, kB" "$ours_rss_add" "$go_rss_add"
row "peak RSS of the bridge itself in DEL, kB" "$ours_rss_del" "$go_rss_del"
for bin in bridge host-local; do
    row "size of $bin, MB (ours $(linkage "$OURS_DIR/$bin"), ref $(linkage "$GO_DIR/$bin"))" \
        "$(size "$OURS_DIR/$bin")" "$(size "$GO_DIR/$bin")"
done
