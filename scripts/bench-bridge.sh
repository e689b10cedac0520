#!/usr/bin/env bash
# Benchmark: ADD and DEL of the bridge plugin with ipMasq (iptables backend) and
# host-local, ours vs the Go reference (/usr/lib/cni), in throwaway namespaces.
# Prints the median wall time per verb and the ratio ours/Go. Needs root.
#
#   scripts/bench-bridge.sh [RUNS]        (default 30; one warm-up run each, not counted)
#
# Ours: release build in $CARGO_TARGET_DIR (default target/). Our host-local is used
# when it answers ADD, else the Go one for both (said in the output).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUNS=${1:-30}
GO_DIR=/usr/lib/cni
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release -q -p bridge -p host-local
OURS_DIR=$TARGET/release
OURS_DIR=$(cd "$OURS_DIR" && pwd)

make_work bench-bridge
HOST_NS=bench-br-h-$$
CTR_NS=bench-br-c-$$
make_netns "$HOST_NS"
make_netns "$CTR_NS"

# Does our host-local answer ADD?
probe_conf='{"cniVersion":"1.0.0","name":"probe","type":"bridge","ipam":{"type":"host-local","subnet":"10.99.0.0/24","dataDir":"'$WORK/probe'"}}'
if CNI_COMMAND=ADD CNI_CONTAINERID=p CNI_NETNS=/run/netns/$CTR_NS CNI_IFNAME=eth0 CNI_PATH=$OURS_DIR \
    "$OURS_DIR/host-local" <<<"$probe_conf" 2>/dev/null | grep -q '"10.99.0.'; then
    OUR_IPAM=$OURS_DIR/host-local
else
    OUR_IPAM=$GO_DIR/host-local
    echo "note: our host-local is not ready; both use the Go host-local"
fi
rm -rf "$WORK/probe"

# CNI_PATH per implementation: bridge + host-local.
mkdir -p "$WORK/ours" "$WORK/go"
ln -s "$OURS_DIR/bridge" "$WORK/ours/bridge"
ln -s "$OUR_IPAM" "$WORK/ours/host-local"
ln -s "$GO_DIR/bridge" "$WORK/go/bridge"
ln -s "$GO_DIR/host-local" "$WORK/go/host-local"

# Runs inside the host netns, so each plugin run is a plain exec (no `ip netns exec`
# in the timed path). Prints "add_us del_us" per run.
bench_one() { # impl
    local impl=$1
    local conf='{"cniVersion":"1.0.0","name":"bench-'$impl'","type":"bridge","bridge":"br-'$impl'",
      "isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"iptables",
      "ipam":{"type":"host-local","subnet":"10.77.0.0/24","dataDir":"'$WORK/data-$impl'"}}'
    ip netns exec "$HOST_NS" bash -c '
        set -e
        export CNI_NETNS=/run/netns/'"$CTR_NS"' CNI_IFNAME=eth0 CNI_PATH='"$WORK/$impl"'
        conf=$1
        for i in $(seq 0 '"$RUNS"'); do
            export CNI_CONTAINERID=bench-$i
            t0=$EPOCHREALTIME
            CNI_COMMAND=ADD '"$WORK/$impl"'/bridge <<<"$conf" >/dev/null
            t1=$EPOCHREALTIME
            CNI_COMMAND=DEL '"$WORK/$impl"'/bridge <<<"$conf" >/dev/null
            t2=$EPOCHREALTIME
            # Run 0 creates the bridge: warm-up, not counted.
            [ "$i" = 0 ] && continue
            echo $(( (${t1/./} - ${t0/./}) )) $(( (${t2/./} - ${t1/./}) ))
        done' _ "$conf"
}

bench_one ours >"$WORK/ours.txt"
bench_one go >"$WORK/go.txt"

# Nothing may be left: no veth, no CNI rule, no reserved IP.
leftover=$(ip -n "$HOST_NS" -o link show type veth | wc -l)
rules=$(ip netns exec "$HOST_NS" iptables-save -t nat | grep -c 'CNI-' || true)
ips=$(find "$WORK"/data-* -type f -name '10.*' 2>/dev/null | wc -l)
if [ "$leftover" != 0 ] || [ "$rules" != 0 ] || [ "$ips" != 0 ]; then
    echo "LEAK: veths=$leftover rules=$rules ips=$ips" >&2
    exit 1
fi

ours_add=$(cut -d' ' -f1 "$WORK/ours.txt" | median_ms)
ours_del=$(cut -d' ' -f2 "$WORK/ours.txt" | median_ms)
go_add=$(cut -d' ' -f1 "$WORK/go.txt" | median_ms)
go_del=$(cut -d' ' -f2 "$WORK/go.txt" | median_ms)
echo "bridge + host-local, ipMasq (iptables), $RUNS runs each, median ms"
printf '%-5s %8s %8s %8s\n' verb ours go ours/go
printf '%-5s %8s %8s %8.2f\n' ADD "$ours_add" "$go_add" "$(echo "$ours_add / $go_add" | bc -l)"
printf '%-5s %8s %8s %8.2f\n' DEL "$ours_del" "$go_del" "$(echo "$ours_del / $go_del" | bc -l)"
