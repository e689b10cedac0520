#!/usr/bin/env bash
# A live node switches between the Go reference plugins and ours, under podman (CNI
# backend), as an installer would: by renaming the plugin directory podman reads.
#   1. Go -> ours: containers made by Go's bridge + host-local, then more by ours; all
#      ping each other and pass CHECK (ours); ours removes them all: nothing left.
#   2. ours -> Go: containers made by ours, removed by Go after switching back: nothing
#      left that Go's own DEL removes after its own ADD (our host-local's index file is
#      not a lease; see the README).
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
# Go's plugins stay in $plugins; a second containers.conf points podman at ours.
rt_podman_conf "$RT_WORK/containers-ours.conf" "$RT_WORK/bin"
per_side=4
start_side() { # <side> <job>: per_side containers, one after another
    local i conf=$CONTAINERS_CONF
    [[ $1 == ours ]] && conf=$RT_WORK/containers-ours.conf
    for i in $(seq "$per_side"); do
        CONTAINERS_CONF=$conf rt_podman_run "par-$1-$2-$i" "$net"
    done
}
pids=()
for job in 1 2; do
    start_side go "$job" &
    pids+=($!)
    start_side ours "$job" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || rt_fail "a container failed to start"; done
mapfile -t names < <(podman ps --format '{{.Names}}' | grep '^par-')
total=$((per_side * 4))
[[ ${#names[@]} -eq $total ]] || rt_fail "$total containers expected, ${#names[@]} running"
ips=$(for c in "${names[@]}"; do rt_podman_ip "$c"; done | sort)
dups=$(uniq -d <<<"$ips")
[[ -z $dups ]] || rt_fail "address held twice: $dups"
[[ $(grep -c . <<<"$ips") -eq $total ]] || rt_fail "not every container has an address: $ips"
rt_assert_attached "$net" "$total" # one lease per container, each for its own id
for c in "${names[@]}"; do
    ip=$(rt_podman_ip "$c")
    rt_assert_lease "$net" "$ip" "$(podman inspect -f '{{.Id}}' "$c")"
done
rt_log "$total containers, $total distinct addresses, one lease each"
podman rm -f -t 0 "${names[@]}" >/dev/null
rt_assert_clean "$net" "after the concurrent run"
rt_pass
