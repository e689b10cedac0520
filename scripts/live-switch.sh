#!/usr/bin/env bash
# A live node switches between the Go reference plugins and ours, under podman (CNI
# backend), as an installer would: by renaming the plugin directory podman reads.
#   1. Go -> ours: containers made by Go's bridge + host-local, then more by ours; all
#      ping each other and pass CHECK (ours); ours removes them all: nothing left.
#   2. ours -> Go: containers made by ours, removed by Go after switching back: nothing
#      left that Go's own DEL removes after its own ADD (our host-local's index file is
#      not a lease; see docs/decisions.md, host-local).
#   3. Both host-locals allocate into one dataDir at once, containers starting under both
#      in parallel: every container gets an address of its own.
# Everything runs in a throwaway sandbox (scripts/runtime-lib.sh); needs root, the Go
# plugins (Debian's containernetworking-plugins) and our release binaries.
set -euo pipefail
# shellcheck source=scripts/runtime-lib.sh
source "$(dirname "$0")/runtime-lib.sh"
rt_main "$@"

net=cnirs-live
p=10.99.5
plugins=$RT_WORK/plugins
# Podman reads $plugins; the other set waits beside it: ours in bin, Go's in go-bin.
mv "$RT_WORK/go-bin" "$plugins"
use_plugins() {
    if [[ $1 == ours ]]; then
        mv "$plugins" "$RT_WORK/go-bin" && mv "$RT_WORK/bin" "$plugins"
    else
        mv "$plugins" "$RT_WORK/bin" && mv "$RT_WORK/go-bin" "$plugins"
    fi
    rt_log "switched the plugin dir to $1"
}

rt_podman_setup "$plugins"
rt_conflist "$RT_WORK/net.d/$net.conflist" "$net" cnirs-live "$p.0/24" 1.0.0

# all_ping <container...>: each pings every other one and the gateway.
all_ping() {
    local from to
    for from in "$@"; do
        rt_ping podman exec "$from" -- "$p.1"
        for to in "$@"; do
            [[ $from == "$to" ]] || rt_ping podman exec "$from" -- "$(rt_podman_ip "$to")"
        done
    done
}

rt_step "Go -> ours"
rt_podman_run go-1 "$net"
rt_podman_run go-2 "$net"
use_plugins ours
rt_podman_run ours-1 "$net"
rt_podman_run ours-2 "$net"
all_ping go-1 go-2 ours-1 ours-2
for c in go-1 go-2 ours-1 ours-2; do rt_podman_check "$c" "$net"; done
rt_assert_attached "$net" 4
podman rm -f -t 0 go-1 go-2 ours-1 ours-2 >/dev/null
rt_assert_clean "$net" "ours removing Go's and its own"

rt_step "ours -> Go"
rt_podman_run ours-3 "$net"
rt_podman_run ours-4 "$net"
all_ping ours-3 ours-4
use_plugins go
rt_podman_run go-3 "$net"
all_ping ours-3 ours-4 go-3
for c in ours-3 ours-4 go-3; do rt_podman_check "$c" "$net"; done
rt_assert_attached "$net" 3
podman rm -f -t 0 ours-3 ours-4 go-3 >/dev/null
rt_assert_clean "$net" "Go removing ours' and its own"
# Go's own ADD + DEL leave lock and last_reserved_ip.0; ours adds only its index.
left=$(find "$RT_WORK/data/$net" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')
[[ $left == "index.host-local last_reserved_ip.0 lock " ]] ||
    rt_fail "unexpected files in the dataDir after Go's DEL: $left"

rt_step "Go and ours allocating at once into one dataDir"
# Go's plugins stay in $plugins; a second containers.conf points podman at ours. Each
# container start runs host-local for a few ms of a second-long podman run, so, that
# both host-locals really meet on the store's lock, each also ADDs directly in a loop
# (like a second runtime on the node) until the containers are up.
rt_podman_conf "$RT_WORK/containers-ours.conf" "$RT_WORK/bin"
ip netns add storm # in the sandbox's own /run: a netns for the direct ADDs
rt_on_exit ip netns del storm
ipam_conf=$(jq -c '{cniVersion, name, ipam: .plugins[0].ipam}' "$RT_WORK/net.d/$net.conflist")
host_local() { # <plugin-dir> <verb> <container-id>
    CNI_COMMAND=$2 CNI_CONTAINERID=$3 CNI_NETNS=/run/netns/storm CNI_IFNAME=eth0 \
        CNI_PATH=$1 "$1/host-local" <<<"$ipam_conf"
}
side_dir() { if [[ $1 == go ]]; then echo "$plugins"; else echo "$RT_WORK/bin"; fi; }
storm() { # <side>: direct ADDs until the containers are up (at most 40)
    local i=0 out
    while [[ ! -e $RT_WORK/started ]] && ((i < 40)); do
        i=$((i + 1))
        out=$(host_local "$(side_dir "$1")" ADD "storm-$1-$i") || rt_fail "$1 host-local ADD: $out"
        jq -r '.ips[0].address' <<<"$out" | cut -d/ -f1 >>"$RT_WORK/storm-$1.ips"
    done
}
per_side=4
start_side() { # <side> <job>: per_side containers, one after another
    local i conf=$CONTAINERS_CONF
    [[ $1 == ours ]] && conf=$RT_WORK/containers-ours.conf
    for i in $(seq "$per_side"); do
        CONTAINERS_CONF=$conf rt_podman_run "par-$1-$2-$i" "$net"
    done
}
storms=()
for side in go ours; do
    storm "$side" &
    storms+=($!)
done
pids=()
for job in 1 2; do
    for side in go ours; do
        start_side "$side" "$job" &
        pids+=($!)
    done
done
for pid in "${pids[@]}"; do wait "$pid" || rt_fail "a container failed to start"; done
touch "$RT_WORK/started"
for pid in "${storms[@]}"; do wait "$pid" || rt_fail "a direct host-local ADD failed"; done

mapfile -t names < <(podman ps --format '{{.Names}}' | grep '^par-')
total=$((per_side * 4))
[[ ${#names[@]} -eq $total ]] || rt_fail "$total containers expected, ${#names[@]} running"
direct=$(cat "$RT_WORK"/storm-*.ips | grep -c .)
ips=$({
    for c in "${names[@]}"; do rt_podman_ip "$c"; done
    cat "$RT_WORK"/storm-*.ips
} | sort)
dups=$(uniq -d <<<"$ips")
[[ -z $dups ]] || rt_fail "address held twice: $dups"
[[ $(grep -c "^$p\." <<<"$ips") -eq $((total + direct)) ]] ||
    rt_fail "not every container has an address: $ips"
for c in "${names[@]}"; do
    rt_assert_lease "$net" "$(rt_podman_ip "$c")" "$(podman inspect -f '{{.Id}}' "$c")"
done
leases=$(find "$RT_WORK/data/$net" -type f -regextype posix-extended -regex '.*/[0-9a-f.:]+' | wc -l)
[[ $leases -eq $((total + direct)) ]] || rt_fail "$((total + direct)) leases expected, $leases found"
rt_log "$total containers and $direct direct ADDs: all addresses distinct, one lease each"

# Each side's direct leases are released by the other side's host-local.
for side in go ours; do
    other=go
    [[ $side == go ]] && other=ours
    n=$(grep -c . "$RT_WORK/storm-$side.ips")
    for i in $(seq "$n"); do
        host_local "$(side_dir "$other")" DEL "storm-$side-$i" >/dev/null ||
            rt_fail "$other host-local DEL of storm-$side-$i"
    done
done
podman rm -f -t 0 "${names[@]}" >/dev/null
rt_assert_clean "$net" "after the concurrent run"
rt_pass
