#!/usr/bin/env bash
# Where the time goes in one bridge ADD and DEL (ours, release build): runs ADD/DEL (with
# prevResult) RUNS times in throwaway namespaces with CNI_RS_TIMINGS=1 and prints the
# median of each step
# (ms since the previous step point of the same process; see sysproc/src/step.rs). The
# IPAM plugin's own steps show as host-local.*; the bridge's step that waited for it
# (bridge.ipam-added / bridge.ipam-released) includes its exec. Needs root.
#
#   scripts/timings.sh [RUNS] [BACKEND] [FILL]
#
# Defaults 20 iptables 0; one warm-up run, not counted. FILL attachments are put on the
# bridge first (in a namespace of their own) to show which steps grow with the pods.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUNS=${1:-20}
BACKEND=${2:-iptables}
FILL=${3:-0}
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release -q -p bridge -p host-local
BIN=$(cd "$TARGET/release" && pwd)

make_work timings
HOST_NS=timings-h-$$
CTR_NS=timings-c-$$
make_netns "$HOST_NS"
make_netns "$CTR_NS"
make_netns "$CTR_NS-fill"  # the FILL attachments

conf='{"cniVersion":"1.0.0","name":"timings","type":"bridge","bridge":"br-timings",
  "isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"'$BACKEND'",
  "ipam":{"type":"host-local","subnet":"10.78.0.0/16","dataDir":"'$WORK/data'"}}'
ip netns exec "$HOST_NS" bash -c '
    set -e
    export CNI_NETNS=/run/netns/'"$CTR_NS"' CNI_IFNAME=eth0 CNI_PATH='"$BIN"' CNI_RS_TIMINGS=1
    conf=$1
    for i in $(seq 1 '"$FILL"'); do
        CNI_RS_TIMINGS= CNI_COMMAND=ADD CNI_CONTAINERID=fill-$i CNI_IFNAME=eth$i CNI_NETNS=/run/netns/'"$CTR_NS"'-fill \
            '"$BIN"'/bridge <<<"$conf" >/dev/null
    done
    for i in $(seq 0 '"$RUNS"'); do
        export CNI_CONTAINERID=timings-$i
        log=/dev/null
        [ "$i" != 0 ] && log='"$WORK"'/steps.txt   # run 0 creates the bridge: warm-up
        res=$(CNI_COMMAND=ADD '"$BIN"'/bridge <<<"$conf" 2>>"$log")
        CNI_COMMAND=DEL '"$BIN"'/bridge <<<"${conf%\}},\"prevResult\":$res}" >/dev/null 2>>"$log"
    done
    for i in $(seq 1 '"$FILL"'); do
        CNI_RS_TIMINGS= CNI_COMMAND=DEL CNI_CONTAINERID=fill-$i CNI_IFNAME=eth$i CNI_NETNS=/run/netns/'"$CTR_NS"'-fill \
            '"$BIN"'/bridge <<<"$conf" >/dev/null
    done' _ "$conf"

# A DEL that failed to undo an ADD would skew the next run: nothing may be left.
leftover=$(ip -n "$HOST_NS" -o link show type veth | wc -l)
if [ "$leftover" != 0 ]; then
    echo "LEAK: $leftover veths left" >&2
    exit 1
fi

echo "bridge ($BACKEND ipMasq, isDefaultGateway) + host-local, DEL with prevResult,"
echo "$FILL other attachments, $RUNS runs, median ms per step"
# Steps in the order they first ran; each median over the runs that passed it.
awk '$1 == "timing:" {
        if (!($2 in n)) order[++k] = $2
        v[$2, ++n[$2]] = $3
    }
    END {
        for (i = 1; i <= k; i++) {
            s = order[i]; c = n[s]
            for (a = 1; a <= c; a++) x[a] = v[s, a]
            for (a = 2; a <= c; a++) { t = x[a]; b = a - 1; while (b > 0 && x[b] > t) { x[b + 1] = x[b]; b-- } x[b + 1] = t }
            m = (c % 2) ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2
            printf "%-40s %8.2f\n", s, m
        }
    }' "$WORK/steps.txt"
