#!/usr/bin/env bash
# Benchmark: pod-to-pod TCP throughput and latency across two "nodes" on different
# segments (A1 -- router -- B1), in the same run:
#   - underlay: node A1 to node B1's underlay address (the ceiling);
#   - direct:   pod to pod over plain routes through the router (what host-gw would give
#               if the router knew the podCIDRs; pod MTU 1500);
#   - overlay:  pod to pod through the VXLAN overlay, built with the same kernel objects
#               hostnet::node makes (device cni-rs.vxlan, nolearning, MTU 1450, FDB entry,
#               permanent neighbour of the peer range's network address, onlink route
#               proto 0xcb; see hostnet/src/node/overlay_tests.rs), pod MTU 1450.
# Figures: iperf3 TCP receiver throughput (Mbit/s, one stream) and ping RTT (avg ms over
# PINGS echoes). veths on one machine: the figures compare paths, not NICs.
#
#   scripts/bench-overlay.sh [SECONDS] [PINGS]     (default 5 and 200)
#
# Needs root and iperf3 (Debian package `iperf3`). Fails when a path does not carry
# traffic, never on a figure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
source scripts/packages.sh
SECS=${1:-5}
PINGS=${2:-200}
need_packages "the overlay benchmark" iperf3:iperf3 ping:iputils-ping ip:iproute2

make_work bench-overlay
P=bo-$$
for n in r a1 b1 pa pb; do make_netns "$P-$n"; ip -n "$P-$n" link set lo up; done
nx() { local ns=$1; shift; ip netns exec "$P-$ns" "$@"; }

# veth NAME_HERE NS_HERE ADDR_HERE NAME_THERE NS_THERE ADDR_THERE
veth() {
    ip link add "$1" netns "$P-$2" type veth peer name "$4" netns "$P-$5"
    ip -n "$P-$2" addr add "$3" dev "$1"
    ip -n "$P-$5" addr add "$6" dev "$4"
    ip -n "$P-$2" link set "$1" up
    ip -n "$P-$5" link set "$4" up
}
veth a1 r 192.168.10.1/24 eth0 a1 192.168.10.11/24
veth b1 r 192.168.20.1/24 eth0 b1 192.168.20.21/24
veth pod0 a1 10.244.1.1/24 eth0 pa 10.244.1.2/24
veth pod0 b1 10.244.3.1/24 eth0 pb 10.244.3.2/24
for n in r a1 b1; do nx "$n" sysctl -qw net.ipv4.ip_forward=1; done
nx a1 ip route add default via 192.168.10.1
nx b1 ip route add default via 192.168.20.1
nx pa ip route add default via 10.244.1.1
nx pb ip route add default via 10.244.3.1

server() { nx "$1" iperf3 -s -D >/dev/null; sleep 0.3; }
server b1
server pb

# measure LABEL FROM_NS TO_ADDR: one line of figures.
measure() {
    local mbps rtt
    mbps=$(nx "$2" iperf3 -c "$3" -t "$SECS" -f m | awk '/receiver/ {print $(NF-2)}')
    rtt=$(nx "$2" ping -q -c "$PINGS" -i 0.005 "$3" | awk -F/ '/^rtt/ {print $5}')
    [[ -n $mbps && -n $rtt ]] || { echo "error: no traffic on the $1 path" >&2; exit 1; }
    printf '%-9s %10s Mbit/s %8s ms\n' "$1" "$mbps" "$rtt"
}

echo "path      throughput (1 TCP stream)  RTT avg ($PINGS pings)"
measure underlay a1 192.168.20.21

# direct: plain routes, no encapsulation.
nx a1 ip route add 10.244.3.0/24 via 192.168.10.1
nx r ip route add 10.244.3.0/24 via 192.168.20.21
nx r ip route add 10.244.1.0/24 via 192.168.10.11
nx b1 ip route add 10.244.1.0/24 via 192.168.20.1
measure direct pa 10.244.3.2
nx a1 ip route del 10.244.3.0/24
nx b1 ip route del 10.244.1.0/24
nx r ip route del 10.244.3.0/24
nx r ip route del 10.244.1.0/24

# overlay: what hostnet's ensure_vxlan + add_overlay_peer make, by hand.
# A locally administered MAC per node address (the device's own, and what its peers use
# for it), as hostnet's vtep_mac; the exact hash does not matter here.
mac_of() { printf '02:%s' "$(printf '%s' "$1" | sha256sum | cut -c1-10 | sed 's/../&:/g; s/:$//')"; }
overlay() { # NS LOCAL PEER_IP PEER_CIDR PEER_GW
    local mac
    mac=$(mac_of "$3")
    nx "$1" ip link add cni-rs.vxlan mtu 1450 address "$(mac_of "$2")" type vxlan id 4242 local "$2" dstport 8472 nolearning
    nx "$1" ip link set cni-rs.vxlan up
    nx "$1" bridge fdb append "$mac" dev cni-rs.vxlan self permanent dst "$3"
    nx "$1" ip neigh replace "$5" lladdr "$mac" dev cni-rs.vxlan nud permanent
    nx "$1" ip route add "$4" via "$5" dev cni-rs.vxlan onlink proto 0xcb
}
overlay a1 192.168.10.11 192.168.20.21 10.244.3.0/24 10.244.3.0
overlay b1 192.168.20.21 192.168.10.11 10.244.1.0/24 10.244.1.0
for n in a1:pod0 pa:eth0 b1:pod0 pb:eth0; do nx "${n%:*}" ip link set "${n#*:}" mtu 1450; done
nx pa ping -q -c 1 -W 2 -M do -s 1422 10.244.3.2 >/dev/null || { echo "error: a full-size DF packet did not pass the overlay" >&2; exit 1; }
measure overlay pa 10.244.3.2
