#!/usr/bin/env bash
# NetworkPolicy datapath benchmark (issue 29): two pods on the bridge of one node
# namespace (br_netfilter on, as the agent requires), the client 10.60.0.2 and the
# server 10.60.0.3, measured side by side in one run, rounds alternating between:
#   none:   no table inet cni-rs-netpol at all;
#   empty:  the table with no policy (what the agent programs on a node whose pods no
#           policy selects: conntrack and the base chains on the path);
#   N:      N policies (default 1000) selecting the server, each allowing the client on
#           its own port, the one allowing the benchmark's ports last in the server's
#           selection chain (without its port map every policy chain would be walked
#           by a new connection), plus N unrelated ones
#           (agent/examples/netpol-datapath.rs programs it through hostnet's
#           PolicyNet, as the agent does).
# Figures: iperf3 TCP throughput (one stream, receiver, Gbit/s) and new TCP connections
# per second (one client, connect + server's close + close, one after the other);
# medians of ROUNDS rounds and the ratios to `none` and `empty`. veths on one machine:
# the figures compare tables, not NICs. The node's conntrack TIME_WAIT timeout is 1 s
# (otherwise the short connections of a few rounds fill its table).
#
#   scripts/bench-netpol-datapath.sh [POLICIES] [SECONDS] [ROUNDS]   (default 1000 5 5)
#
# Needs root and iperf3 (Debian package `iperf3`). Fails when the path does not carry
# traffic or the table does not police it (a port no policy allows must be refused),
# never on a figure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/packages.sh
POLICIES=${1:-1000}
SECS=${2:-5}
ROUNDS=${3:-5}
need_packages "the NetworkPolicy datapath benchmark" iperf3:iperf3 ip:iproute2
[[ -d /proc/sys/net/bridge ]] || modprobe br_netfilter

nice -n 10 cargo build -q --release -p cni-rs-agent --example netpol-datapath
helper=${CARGO_TARGET_DIR:-target}/release/examples/netpol-datapath

make_work bench-netpol-datapath
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    [[ -f $WORK/iperf.pid ]] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null || true
    bench_cleanup
}
trap cleanup EXIT
P=cnirs-bnd-$$
for n in node a b; do make_netns "$P-$n"; ip -n "$P-$n" link set lo up; done
nx() { local ns=$1; shift; ip netns exec "$P-$ns" "$@"; }
ip -n "$P-node" link add br0 type bridge
ip -n "$P-node" addr add 10.60.0.1/24 dev br0
ip -n "$P-node" addr add fd60::1/64 dev br0 nodad
ip -n "$P-node" link set br0 up
pod() { # NS ADDR4 ADDR6
    ip -n "$P-node" link add "veth-$1" type veth peer name eth0 netns "$P-$1"
    ip -n "$P-node" link set "veth-$1" master br0 up
    ip -n "$P-$1" addr add "$2/24" dev eth0
    ip -n "$P-$1" addr add "$3/64" dev eth0 nodad
    ip -n "$P-$1" link set eth0 up
}
pod a 10.60.0.2 fd60::2
pod b 10.60.0.3 fd60::3
for s in net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 net.ipv4.ip_forward=1; do
    nx node sysctl -qw "$s"
done

nx b iperf3 -s -D -p 5201 --pidfile "$WORK/iperf.pid" >/dev/null
for port in 9000 9001; do
    nx b "$helper" serve "$port" &
    PIDS+=($!)
done
sleep 0.5

# open PORT: whether a TCP connection from the client to the server's PORT is made.
open() { nx a timeout 2 bash -c "exec 3<>/dev/tcp/10.60.0.3/$1" 2>/dev/null; }

set_table() { # MODE
    nx node true # the namespace exists
    "$helper" table "$P-node" "$1"
    # conntrack is there once a table uses it: its TIME_WAIT shortened (see above).
    nx node sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_time_wait=1 2>/dev/null || true
    open 9000 || { echo "error: no connection on the benchmark's port ($1)" >&2; exit 1; }
    if [[ $1 != none && $1 != empty ]]; then
        if open 9001; then echo "error: port 9001 is allowed by no policy but open: the table does not police the bridge" >&2; exit 1; fi
    else
        open 9001 || { echo "error: port 9001 closed without a policy ($1)" >&2; exit 1; }
    fi
}

measure() { # MODE ROUND: one line "MODE gbps cps"
    local gbps cps
    gbps=$(nx a iperf3 -c 10.60.0.3 -p 5201 -t "$SECS" -f g | awk '/receiver/ {print $(NF-2)}')
    cps=$(nx a "$helper" connect 10.60.0.3:9000 "$SECS")
    [[ -n $gbps && -n $cps ]] || { echo "error: no figures for $1" >&2; exit 1; }
    printf '%-6s round %d: %6s Gbit/s %8s connections/s\n' "$1" "$2" "$gbps" "$cps" >&2
    echo "$1 $gbps $cps" >>"$WORK/figures"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
modes=(none empty "$POLICIES")
for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate the order: a drift of the machine's load does not favour one mode.
    order=("${modes[@]}")
    ((r % 2 == 0)) && order=("$POLICIES" empty none)
    for m in "${order[@]}"; do
        set_table "$m" >"$WORK/table-$m"
        measure "$m" "$r"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$WORK/table-$POLICIES"
python3 - "$WORK/figures" "$POLICIES" "$ROUNDS" "$SECS" <<'EOF'
import statistics, sys
path, policies, rounds, secs = sys.argv[1:]
rows = [l.split() for l in open(path)]
med = {}
for mode in ("none", "empty", policies):
    gbps = [float(r[1]) for r in rows if r[0] == mode]
    cps = [float(r[2]) for r in rows if r[0] == mode]
    med[mode] = (statistics.median(gbps), statistics.median(cps))
print(f"medians of {rounds} rounds of {secs} s (bridge, one node):")
print(f"  {'table':<22} {'TCP Gbit/s':>10} {'conn/s':>9}")
for mode, label in (("none", "none"), ("empty", "empty (no policy)"), (policies, f"{policies} policies")):
    g, c = med[mode]
    print(f"  {label:<22} {g:>10.2f} {c:>9.0f}")
g, c = med[policies]
for base in ("none", "empty"):
    bg, bc = med[base]
    print(f"  ratio {policies} policies / {base}: throughput {g / bg:.3f}, connections/s {c / bc:.3f} (goal >= 0.9)")
EOF
