#!/usr/bin/env bash
# Podman (Debian's 4.3, CNI backend) drives our release bridge + host-local, at each
# cniVersion it speaks: two containers get addresses and ping each other and the gateway,
# --ip gets the requested address, stop/start re-attaches, `podman rm` leaves no lease,
# veth, rule or cached result, and `podman network rm` leaves no config. With our portmap
# chained after the bridge, `podman run -p` is reached through the node's address and
# 127.0.0.1, and `podman rm` leaves no rule naming the container.
# Everything runs in a throwaway sandbox (scripts/runtime-lib.sh); needs root and the
# release binaries: cargo build --release -p bridge -p host-local -p portmap -p cnitool
set -euo pipefail
# shellcheck source=scripts/runtime-lib.sh
source "$(dirname "$0")/runtime-lib.sh"
# portmap's release binary, before the sandbox hides the toolchain's paths (the demo, which
# scripts/test.sh runs first, builds the other plugins).
if [[ ${1:-} != --inside && ! -x $RT_RELEASE/portmap ]]; then
    (cd "$RT_REPO" && cargo build --release -q -p portmap) || rt_fail "cargo build --release -p portmap"
fi
rt_main "$@"

[[ -x $RT_RELEASE/portmap ]] || rt_fail "no $RT_RELEASE/portmap: cargo build --release -p portmap"
cp "$RT_RELEASE/portmap" "$RT_WORK/bin/"
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

# portmap_conflist <file> <network> <bridge> <subnet>: the bridge's conflist with portmap
# chained after it, as podman's own CNI configs chain it (the portMappings capability).
portmap_conflist() {
    rt_conflist "$1" "$2" "$3" "$4" 1.0.0
    jq '.plugins[0].hairpinMode = true
        | .plugins += [{"type": "portmap", "capabilities": {"portMappings": true}}]' \
        "$1" >"$1.tmp" && mv "$1.tmp" "$1"
}

# http_get <address> <port>: a status line from the container's httpd, through the port.
http_get() {
    timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "GET / HTTP/1.0\r\n\r\n" >&3 &&
        head -n1 <&3' _ "$1" "$2" 2>/dev/null
}

portmap_scenario() {
    local net=cnirs-pm br=cnirspm p=10.99.9 id left addr
    rt_step "podman run -p, portmap chained, network $net"
    portmap_conflist "$RT_WORK/net.d/$net.conflist" "$net" "$br" "$p.0/24"
    podman run -d --name "$net-web" --network "$net" --cgroup-parent "$RT_CGROUP" \
        -p 30080:80 localhost/cnirs-busybox:1 busybox httpd -f -p 80 -h /tmp >/dev/null ||
        rt_fail "podman run -p 30080:80"
    id=$(podman inspect -f '{{.Id}}' "$net-web")
    # The node's address on the bridge, and localhost (route_localnet on the bridge).
    for addr in "$p.1" 127.0.0.1; do
        [[ $(http_get "$addr" 30080) == HTTP/1.* ]] || rt_fail "no answer at $addr:30080"
    done
    [[ $(sysctl -n "net.ipv4.conf.$br.route_localnet") == 1 ]] || rt_fail "route_localnet not set"
    iptables-save -t nat | grep -cF "id: \\\"$id" >/dev/null || rt_fail "no portmap rule names $id"
    rt_log "podman -p: the container answers at $p.1:30080 and 127.0.0.1:30080"
    podman rm -f -t 0 "$net-web" >/dev/null
    [[ -z $(http_get "$p.1" 30080) ]] || rt_fail "port 30080 still open after podman rm"
    left=$(iptables-save -t nat | grep -E "CNI-DN-|$id" || true)
    [[ -z $left ]] || rt_fail "podman rm left portmap rules: $left"
    # The shared chains stay by design (every attachment jumps through them); removed here
    # so the common check sees the rest of the network clean.
    iptables-save -t nat | grep -E '^-A (PREROUTING|OUTPUT|POSTROUTING) .*CNI-HOSTPORT' |
        sed 's/^-A /-D /' | while read -r rule; do eval "iptables -w -t nat $rule"; done
    for chain in CNI-HOSTPORT-DNAT CNI-HOSTPORT-SETMARK CNI-HOSTPORT-MASQ; do
        iptables -w -t nat -F "$chain" && iptables -w -t nat -X "$chain"
    done
    if ip6tables-save -t nat | grep -c CNI-DN- >/dev/null; then rt_fail "podman rm left IPv6 portmap rules"; fi
    rt_assert_clean "$net" "podman rm (portmap)"
    podman network rm "$net" >/dev/null
}

# Podman's libcni (1.1) speaks up to 1.0.0; 0.4.0 and 0.3.1 are what older conflists say.
scenario 1.0.0 cnirs-v100 cnirs100 10.99.1
scenario 0.4.0 cnirs-v040 cnirs040 10.99.2
scenario 0.3.1 cnirs-v031 cnirs031 10.99.6
portmap_scenario
rt_pass
