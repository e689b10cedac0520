#!/usr/bin/env bash
# containerd (Debian's 1.6, `ctr run --cni`, a private daemon) drives our release
# bridge + host-local, at each cniVersion it speaks: two containers get addresses and ping
# each other and the gateway, a container run again under the same id re-attaches, and
# the DEL that ctr sends when a task ends (empty CNI_NETNS, the cached result as
# prevResult) leaves no lease, veth, rule or cached result.
# Everything runs in a throwaway sandbox (scripts/runtime-lib.sh); needs root and the
# release binaries: cargo build --release -p bridge -p host-local -p cnitool
set -euo pipefail
# shellcheck source=scripts/runtime-lib.sh
source "$(dirname "$0")/runtime-lib.sh"
rt_main "$@"

# The bridge is wrapped to record what ctr sends it (verb and CNI_NETNS), then run as is.
mv "$RT_WORK/bin/bridge" "$RT_WORK/bin/bridge.real"
cat >"$RT_WORK/bin/bridge" <<EOW
#!/bin/sh
echo "\$CNI_COMMAND netns=[\$CNI_NETNS]" >>"$RT_WORK/bridge-calls.log"
exec "$RT_WORK/bin/bridge.real" "\$@"
EOW
chmod +x "$RT_WORK/bin/bridge"

rt_containerd_setup
rt_log "$(containerd --version | cut -d' ' -f3), $(runc --version | head -n1)"

# scenario <cniVersion> <network> <bridge> <subnet prefix>
scenario() {
    local version=$1 net=$2 br=$3 p=$4 ip_a ip_b ip_a2
    rt_step "containerd, cniVersion $version, network $net"
    rm -f "$RT_WORK"/net.d/*
    rt_conflist "$RT_WORK/net.d/10-$net.conflist" "$net" "$br" "$p.0/24" "$version"
    : >"$RT_WORK/bridge-calls.log"

    rt_ctr_run a
    rt_ctr_run b
    ip_a=$(rt_ctr_ip a)
    ip_b=$(rt_ctr_ip b)
    [[ $ip_a == "$p".* && $ip_b == "$p".* && $ip_a != "$ip_b" ]] ||
        rt_fail "addresses from $p.0/24 expected: a=$ip_a b=$ip_b"
    rt_log "a=$ip_a b=$ip_b"
    rt_assert_lease "$net" "$ip_a" cnirs-a # ctr's id: <namespace>-<container>
    rt_ping rt_ctr_exec a -- "$ip_b"
    rt_ping rt_ctr_exec b -- "$ip_a"
    rt_ping rt_ctr_exec a -- "$p.1"
    rt_ping rt_ctr_exec b -- "$p.1"
    rt_assert_attached "$net" 2

    # The task ends: ctr DELs (empty netns) and removes the container; run again, same id.
    rt_ctr_stop a
    [[ ! -e $RT_WORK/data/$net/$ip_a ]] || rt_fail "the end of task a left its lease $ip_a"
    rt_ctr_run a
    ip_a2=$(rt_ctr_ip a)
    rt_ping rt_ctr_exec a -- "$ip_b"
    rt_ping rt_ctr_exec b -- "$ip_a2"
    rt_ping rt_ctr_exec a -- "$p.1"
    rt_ctr_exec a ip -4 route | grep -q "^default via $p.1" || rt_fail "no default route"

    rt_ctr_stop a
    rt_ctr_stop b
    rt_assert_clean "$net" "ctr task end"
    grep -q '^DEL netns=\[\]$' "$RT_WORK/bridge-calls.log" ||
        rt_fail "no DEL with an empty CNI_NETNS seen: $(cat "$RT_WORK/bridge-calls.log")"
    ! grep -q '^DEL netns=\[[^]]' "$RT_WORK/bridge-calls.log" ||
        rt_fail "ctr DELed with a netns, not the case under test"
}

# containerd 1.6's libcni (1.1) speaks up to 1.0.0; 0.4.0 and 0.3.1 are what older conflists say.
scenario 1.0.0 cnirs-v100 cnirs100 10.99.3
scenario 0.4.0 cnirs-v040 cnirs040 10.99.4
scenario 0.3.1 cnirs-v031 cnirs031 10.99.7
rt_pass
