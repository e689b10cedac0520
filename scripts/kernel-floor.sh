#!/usr/bin/env bash
# The kernel's share of an ADD on a busy bridge, with no CNI plugin at all: the netlink
# steps a bridge ADD makes (veth pair with the peer born in the container, port on the
# bridge, up; address, up and default route in the container; a read of the bridge's
# addresses), made by ip(8) batches, on a bridge with no other port and with FILL
# forwarding ports (peers up in another namespace, as pods are). The process costs are
# the same in both; what grows is the kernel's work (and its RTNL lock) for a bridge with
# more ports. Needs root. Prints median and mean ms.
#
#   scripts/kernel-floor.sh [RUNS] [FILL]     (default 20 250)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUNS=${1:-20}
FILL=${2:-250}

# floor PORTS: MEDIAN and MEAN (ms) of RUNS attachments to a bridge with PORTS ports.
floor() {
    local ports=$1 h=floor-h-$$-$1 c=floor-c-$$-$1 i r s e
    make_netns "$h"
    make_netns "$c"
    make_netns "$c-fill"
    ip -n "$h" link add br0 type bridge
    ip -n "$h" link set br0 up
    ip -n "$h" addr add 10.9.0.1/16 dev br0
    for ((i = 1; i <= ports; i++)); do
        echo "link add f$i type veth peer name g$i netns $c-fill"
        echo "link set f$i master br0 up"
    done | ip -n "$h" -batch -
    for ((i = 1; i <= ports; i++)); do echo "link set g$i up"; done | ip -n "$c-fill" -batch -
    sleep 2 # the ports reach forwarding
    : >"$WORK/floor-$ports"
    for ((r = 1; r <= RUNS; r++)); do
        s=${EPOCHREALTIME/./}
        printf 'link add x%d type veth peer name eth0 netns %s\nlink set x%d master br0\nlink set x%d up\n' \
            "$r" "$c" "$r" "$r" | ip -n "$h" -batch -
        printf 'addr add 10.9.1.%d/16 dev eth0\nlink set eth0 up\nroute add default via 10.9.0.1\n' \
            "$r" | ip -n "$c" -batch -
        ip -n "$h" addr show dev br0 >/dev/null
        e=${EPOCHREALTIME/./}
        echo $((e - s)) >>"$WORK/floor-$ports"
        ip -n "$h" link del "x$r"
    done
    MEDIAN=$(median_ms <"$WORK/floor-$ports")
    MEAN=$(awk '{s += $1} END {printf "%.1f", s / NR / 1000}' "$WORK/floor-$ports")
}

make_work kernel-floor
floor 0
none_median=$MEDIAN none_mean=$MEAN
floor "$FILL"
fill_median=$MEDIAN fill_mean=$MEAN
echo "kernel only (ip batches, no plugin): one attachment's netlink steps, $RUNS runs"
printf '%-34s %8s %8s\n' "bridge ports" "median" "mean"
printf '%-34s %8s %8s\n' "0" "$none_median" "$none_mean"
printf '%-34s %8s %8s\n' "$FILL" "$fill_median" "$fill_mean"
awk -v a="$none_median" -v b="$fill_median" -v c="$none_mean" -v d="$fill_mean" \
    'BEGIN {printf "%-34s %8.2f %8.2f\n", "with " '"$FILL"' " / with none, x", b / a, d / c}'
