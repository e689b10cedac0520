#!/usr/bin/env bash
# Podman (Debian's 4.3, CNI backend) drives our release bridge + host-local, at each
# cniVersion it speaks: two containers get addresses and ping each other and the gateway,
# --ip gets the requested address, stop/start re-attaches, `podman rm` leaves no lease,
# veth, rule or cached result, and `podman network rm` leaves no config.
# Everything runs in a throwaway sandbox (scripts/runtime-lib.sh); needs root and the
# release binaries: cargo build --release -p bridge -p host-local -p cnitool
set -euo pipefail
# shellcheck source=scripts/runtime-lib.sh
source "$(dirname "$0")/runtime-lib.sh"
rt_main "$@"

rt_podman_setup "$RT_WORK/bin"
rt_log "$(podman --version), $(runc --version | head -n1)"

# scenario <cniVersion> <network> <bridge> <subnet prefix, e.g. 10.99.1>
scenario() {
    local version=$1 net=$2 br=$3 p=$4 ip_a ip_b ip_a2 id
    rt_step "podman, cniVersion $version, network $net"
    rt_conflist "$RT_WORK/net.d/$net.conflist" "$net" "$br" "$p.0/24" "$version"
    podman network inspect "$net" >/dev/null || rt_fail "podman does not see network $net"

    rt_podman_run "$net-a" "$net"
    rt_podman_run "$net-b" "$net"
    ip_a=$(rt_podman_ip "$net-a")
    ip_b=$(rt_podman_ip "$net-b")
    [[ $ip_a == "$p".* && $ip_b == "$p".* && $ip_a != "$ip_b" ]] ||
        rt_fail "addresses from $p.0/24 expected: a=$ip_a b=$ip_b"
    rt_log "a=$ip_a b=$ip_b"
    id=$(podman inspect -f '{{.Id}}' "$net-a")
    rt_assert_lease "$net" "$ip_a" "$id"
    rt_ping podman exec "$net-a" -- "$ip_b"
    rt_ping podman exec "$net-b" -- "$ip_a"
    rt_ping podman exec "$net-a" -- "$p.1"
    rt_ping podman exec "$net-b" -- "$p.1"

    # A static address through podman's --ip (CNI_ARGS IP=, the "ips" capability).
    rt_podman_run "$net-c" "$net" --ip "$p.77"
    [[ $(rt_podman_ip "$net-c") == "$p.77" ]] || rt_fail "--ip $p.77 not honoured"
    rt_ping podman exec "$net-c" -- "$ip_a"

    # Stop releases the attachment (podman DELs with the container's netns); start ADDs anew.
    podman stop -t 0 "$net-a" >/dev/null
    [[ ! -e $RT_WORK/data/$net/$ip_a ]] || rt_fail "stop left the lease $ip_a"
    podman start "$net-a" >/dev/null
    ip_a2=$(rt_podman_ip "$net-a")
    [[ $ip_a2 == "$p".* ]] || rt_fail "no address after restart: $ip_a2"
    rt_ping podman exec "$net-a" -- "$ip_b"
    rt_ping podman exec "$net-b" -- "$ip_a2"
    rt_ping podman exec "$net-a" -- "$p.1"
    podman exec "$net-a" ip -4 route | grep -q "^default via $p.1" || rt_fail "no default route"

    rt_assert_attached "$net" 3
    podman rm -f -t 0 "$net-a" "$net-b" "$net-c" >/dev/null
    rt_assert_clean "$net" "podman rm"
    podman network rm "$net" >/dev/null
    [[ ! -e $RT_WORK/net.d/$net.conflist ]] || rt_fail "podman network rm left the config"
    rt_assert_clean "$net" "podman network rm"
}

# Podman's libcni (1.1) speaks up to 1.0.0; 0.4.0 and 0.3.1 are what older conflists say.
scenario 1.0.0 cnirs-v100 cnirs100 10.99.1
scenario 0.4.0 cnirs-v040 cnirs040 10.99.2
scenario 0.3.1 cnirs-v031 cnirs031 10.99.6
rt_pass
