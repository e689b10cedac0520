#!/usr/bin/env bash
# Benchmark: portmap chained after the bridge (isDefaultGateway + ipMasq, iptables) and
# host-local, as a runtime chains them, ours vs the Go reference (/usr/lib/cni) measured
# in the same run, in throwaway namespaces. Needs root. For 1 and 20 mappings (tcp), the
# median wall time (ms) of one exec of:
#   - portmap ADD (prevResult: the bridge's result) and portmap DEL (with prevResult)
#   - the whole chain: bridge ADD + portmap ADD, and portmap DEL + bridge DEL
# Each run is timed around the exec from bash (the same fork cost on both sides).
#
#   scripts/bench-portmap.sh [RUNS]     (default 20; one warm-up run each, not counted)
#
# It fails when an operation fails or a rule is left behind, never on a figure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUNS=${1:-20}
GO_DIR=/usr/lib/cni
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release -q -p bridge -p host-local -p portmap
OURS_DIR=$(cd "$TARGET/release" && pwd)

make_work bench-portmap
HOST_NS=bench-pm-h-$$
make_netns "$HOST_NS"
ip -n "$HOST_NS" link set lo up
for impl in ours go; do
    mkdir -p "$WORK/$impl"
    dir=$OURS_DIR
    [[ $impl == go ]] && dir=$GO_DIR
    for bin in bridge host-local portmap; do ln -s "$dir/$bin" "$WORK/$impl/$bin"; done
done

# --- Run inside the host netns.

# plugin BIN VERB CONF: one exec of $WORK/$IMPL/BIN for container bench-0 in $CTR.
plugin() {
    CNI_COMMAND=$2 CNI_CONTAINERID=bench-0 CNI_NETNS=/run/netns/$CTR CNI_IFNAME=eth0 \
        CNI_PATH=$WORK/$IMPL "$WORK/$IMPL/$1" <<<"$3"
}

# chain_runs N: RUNS+1 rounds of the chain with N mappings; prints, for all but the first,
# "bridge_add portmap_add portmap_del bridge_del" in microseconds.
chain_runs() {
    local n=$1 i r maps="" br pm res t0 t1 t2 t3 t4
    for i in $(seq 1 "$n"); do
        maps+="${maps:+,}{\"hostPort\":$((30000 + i)),\"containerPort\":80,\"protocol\":\"tcp\"}"
    done
    br='{"cniVersion":"1.0.0","name":"bench-pm-'$IMPL'","type":"bridge","bridge":"br-'$IMPL'","isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"iptables","ipam":{"type":"host-local","subnet":"10.78.0.0/16","dataDir":"'$WORK/data-$IMPL'"}}'
    pm='{"cniVersion":"1.0.0","name":"bench-pm-'$IMPL'","type":"portmap","runtimeConfig":{"portMappings":['$maps']}'
    for r in $(seq 0 "$RUNS"); do
        t0=$EPOCHREALTIME
        res=$(plugin bridge ADD "$br")
        t1=$EPOCHREALTIME
        plugin portmap ADD "$pm,\"prevResult\":$res}" >/dev/null
        t2=$EPOCHREALTIME
        plugin portmap DEL "$pm,\"prevResult\":$res}" >/dev/null
        t3=$EPOCHREALTIME
        plugin bridge DEL "${br%\}},\"prevResult\":$res}" >/dev/null
        t4=$EPOCHREALTIME
        if iptables-save -t nat | grep -c 'CNI-DN-' >/dev/null; then
            echo "LEAK ($IMPL): portmap rules left after DEL" >&2
            exit 1
        fi
        ((r > 0)) && echo $((${t1/./} - ${t0/./})) $((${t2/./} - ${t1/./})) \
            $((${t3/./} - ${t2/./})) $((${t4/./} - ${t3/./}))
    done
}

in_host() { # FUNCTION ARGS...: runs it in the host netns with the bench's variables
    ip netns exec "$HOST_NS" env IMPL="$IMPL" CTR="$CTR" WORK="$WORK" RUNS="$RUNS" \
        bash -c "set -euo pipefail; $(declare -f plugin chain_runs); \"\$@\"" _ "$@"
}

# Ours and the reference alternate per mapping count, so both meet the same machine load.
for n in 1 20; do
    for IMPL in ours go; do
        CTR=bench-pm-c-$IMPL-$n-$$
        make_netns "$CTR"
        in_host chain_runs "$n" >"$WORK/$IMPL-$n.txt"
    done
done

# --- The table.

col() { cut -d' ' -f"$2" "$WORK/$1.txt" | median_ms; } # FILE FIELD: median in ms
sum_col() { awk -v a="$2" -v b="$3" '{print $a + $b}' "$WORK/$1.txt" | median_ms; }
ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else printf "-" }'; }
row() { printf '%-44s %9s %9s %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

echo "portmap (iptables) chained after bridge isDefaultGateway + ipMasq + host-local; RUNS=$RUNS"
echo "ours: $OURS_DIR  reference: $GO_DIR ($(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo '?'))"
printf '%-44s %9s %9s %8s\n' figure ours reference ratio
for n in 1 20; do
    row "portmap ADD, $n mapping(s), ms" "$(col "ours-$n" 2)" "$(col "go-$n" 2)"
    row "portmap DEL, $n mapping(s), ms" "$(col "ours-$n" 3)" "$(col "go-$n" 3)"
    row "bridge + portmap ADD, $n mapping(s), ms" "$(sum_col "ours-$n" 1 2)" "$(sum_col "go-$n" 1 2)"
    row "portmap + bridge DEL, $n mapping(s), ms" "$(sum_col "ours-$n" 3 4)" "$(sum_col "go-$n" 3 4)"
done
