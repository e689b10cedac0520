# shellcheck shell=bash
# Sourced by the runtime tests (runtime-podman.sh, runtime-containerd.sh, live-switch.sh).
#
# A runtime test runs the real runtime inside a sandbox it makes and removes:
#   - a throwaway network namespace (cnirs-rt-<pid>): the runtime, and so the plugins it
#     runs, live there, so the bridge, veths and firewall rules never reach the machine's
#     own namespace; deleting it takes whatever is left with it;
#   - a private mount namespace in which a fresh sysfs shows that namespace's links, and
#     tmpfs over /run, /var/lib and /opt plus a bind over /etc/cni/net.d give the runtime
#     and libcni's fixed paths (/opt/cni/bin, /etc/cni/net.d, /var/lib/cni, /run/netns,
#     /run/containerd) throwaway places: nothing lands in the machine's directories;
#   - a work dir (RT_WORK) for the plugin dirs, configs, dataDir, image and runtime state.
#
# Usage in a test script:
#   source scripts/runtime-lib.sh
#   rt_main "$@"      # outside: sets up, re-runs the script inside; inside: returns
#   ... the test body, run inside the sandbox; call rt_pass at the end ...
#
# Environment:
#   CARGO_TARGET_DIR   where the release binaries are [default: ./target]
#   CNI_RS_GO_PLUGINS  the Go reference plugins [default: /usr/lib/cni]
#   CNI_RS_BUSYBOX     the static busybox the image is made of [default: /bin/busybox]
#   RT_KEEP=1          keep the work dir (for debugging a failure)

RT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RT_RELEASE=${CARGO_TARGET_DIR:-$RT_REPO/target}/release
RT_GO=${CNI_RS_GO_PLUGINS:-/usr/lib/cni}
RT_BUSYBOX=${CNI_RS_BUSYBOX:-/bin/busybox}
RT_NAME=$(basename "$0" .sh)

rt_log() { printf '%s: %s\n' "$RT_NAME" "$*" >&2; }
rt_fail() {
    rt_log "FAILED: $*"
    exit 1
}
rt_step() { printf '\n== %s: %s\n' "$RT_NAME" "$*" >&2; }

# rt_main "$@": outside the sandbox, make it, run this script again inside it, and remove
# it (also on failure or interrupt); inside, return to the test body.
rt_main() {
    if [[ ${1:-} == --inside ]]; then
        rt_inside_setup
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || rt_fail "needs root: run it as 'sudo $0'"
    # shellcheck source=scripts/packages.sh
    source "$RT_REPO/scripts/packages.sh"
    need_runtime_packages || rt_fail "missing packages"
    for bin in bridge host-local; do
        [[ -x $RT_RELEASE/$bin ]] ||
            rt_fail "no $RT_RELEASE/$bin: build first (cargo build --release -p bridge -p host-local -p cnitool)"
    done
    RT_WORK=$(mktemp -d /tmp/cnirs-rt.XXXXXX)
    RT_NETNS=cnirs-rt-$$
    RT_CGROUP=/$RT_NETNS
    export RT_WORK RT_NETNS RT_CGROUP
    trap rt_outside_cleanup EXIT
    trap 'exit 143' INT TERM
    ip netns add "$RT_NETNS"
    local rc=0
    # In the background, so a signal here reaches the cleanup (bash runs traps only
    # between commands), which passes it on to the inside part.
    nsenter --net="/run/netns/$RT_NETNS" unshare --mount --propagation private \
        bash "$0" --inside &
    RT_INSIDE_PID=$!
    wait "$RT_INSIDE_PID" || rc=$?
    exit "$rc"
}

rt_outside_cleanup() {
    local rc=$? pid
    trap - EXIT
    trap '' INT TERM
    set +e
    # Interrupted: let the inside part undo its setup first.
    if [[ -n ${RT_INSIDE_PID:-} ]] && kill -TERM "$RT_INSIDE_PID" 2>/dev/null; then
        wait "$RT_INSIDE_PID"
    fi
    # A runtime daemon or container the inside part could not stop: end those processes
    # (all started by this test, in its namespace), then the namespace itself.
    for pid in $(ip netns pids "$RT_NETNS" 2>/dev/null); do
        kill -9 "$pid" 2>/dev/null
    done
    ip netns del "$RT_NETNS" 2>/dev/null
    # The containers' cgroups (all below /$RT_NETNS: RT_CGROUP), once empty.
    find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "$RT_NETNS" \
        -exec find {} -depth -type d -delete \; 2>/dev/null
    if [[ -n ${RT_KEEP:-} ]]; then
        rt_log "kept $RT_WORK"
    else
        # Mounts of the private namespace are gone with its last process; unmount
        # anything the runtime left mounted below the work dir before removing it.
        grep -o " $RT_WORK[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
        rm -rf "$RT_WORK"
    fi
    exit "$rc"
}

rt_inside_setup() {
    set -euo pipefail
    cd "$RT_WORK"
    mkdir -p cgroup bin go-bin net.d data tmp
    # A fresh sysfs shows this network namespace's links (the runtime reads them there);
    # the cgroup mounts below /sys are carried over.
    mount --rbind /sys/fs/cgroup cgroup
    umount -l /sys
    mount -t sysfs sysfs /sys
    mount --move cgroup /sys/fs/cgroup
    mount -t tmpfs tmpfs /run
    mount -t tmpfs tmpfs /var/lib
    mount -t tmpfs tmpfs /opt
    # Podman's package ships /etc/cni/net.d; a bind needs it, and the machine's /etc is
    # not ours to add to.
    [[ -d /etc/cni/net.d ]] || rt_fail "no /etc/cni/net.d to cover (reinstall podman)"
    mount --bind net.d /etc/cni/net.d
    mkdir -p /opt/cni /var/lib/cni /run/netns
    ln -s "$RT_WORK/bin" /opt/cni/bin
    ip link set lo up
    cp "$RT_RELEASE/bridge" "$RT_RELEASE/host-local" bin/
    cp "$RT_GO/bridge" "$RT_GO/host-local" go-bin/
    trap rt_inside_cleanup EXIT
    trap 'exit 143' INT TERM
}

# Cleanup hooks of the test body, run in reverse order on exit inside the sandbox.
RT_CLEANUPS=()
rt_on_exit() { RT_CLEANUPS=("$*" "${RT_CLEANUPS[@]}"); }

rt_inside_cleanup() {
    local rc=$? c
    trap - EXIT
    trap '' INT TERM
    set +e
    for c in "${RT_CLEANUPS[@]}"; do
        eval "$c" >/dev/null 2>&1
    done
    if [[ $rc -ne 0 ]]; then
        rt_log "FAILED (exit $rc)"
    fi
    exit "$rc"
}

# rt_conflist <file> <network-name> <bridge> <subnet> [cniVersion]: our bridge + host-local,
# dataDir in the work dir, what an operator would write for a runtime.
rt_conflist() {
    cat >"$1" <<EOF
{
  "cniVersion": "${5:-1.0.0}",
  "name": "$2",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$3",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$RT_WORK/data",
        "ranges": [[{"subnet": "$4"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# rt_image_archive <file> <ref-name>: an OCI image archive holding Debian's busybox-static
# (and its applet links), made here: nothing is pulled.
rt_image_archive() {
    local out=$1 ref=$2 dir root applet
    dir=$(mktemp -d "$RT_WORK/image.XXXXXX")
    root=$dir/rootfs
    mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/etc" "$root/tmp" \
        "$dir/oci/blobs/sha256"
    # The image has no libc: Debian's busybox-static, not the dynamic busybox package.
    [[ $(LC_ALL=C ldd "$RT_BUSYBOX" 2>&1 || true) == *"not a dynamic executable"* ]] ||
        rt_fail "$RT_BUSYBOX is not statically linked: install busybox-static"
    cp "$RT_BUSYBOX" "$root/bin/busybox"
    for applet in sh ping ip sleep cat ls hostname ifconfig route; do
        ln -s busybox "$root/bin/$applet"
    done
    tar -C "$root" --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 \
        -cf "$dir/layer.tar" .
    local layer layer_size config config_size manifest manifest_size
    layer=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
    layer_size=$(stat -c %s "$dir/layer.tar")
    mv "$dir/layer.tar" "$dir/oci/blobs/sha256/$layer"
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["/bin/sh"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
        "$layer" >"$dir/config.json"
    config=$(sha256sum "$dir/config.json" | cut -d' ' -f1)
    config_size=$(stat -c %s "$dir/config.json")
    mv "$dir/config.json" "$dir/oci/blobs/sha256/$config"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
        "$config" "$config_size" "$layer" "$layer_size" >"$dir/manifest.json"
    manifest=$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)
    manifest_size=$(stat -c %s "$dir/manifest.json")
    mv "$dir/manifest.json" "$dir/oci/blobs/sha256/$manifest"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"localhost/%s"}}]}' \
        "$manifest" "$manifest_size" "$ref" "$ref" >"$dir/oci/index.json"
    echo '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci/oci-layout"
    tar -C "$dir/oci" -cf "$out" .
    rm -rf "$dir"
}

# rt_podman_setup <plugin-dir>: podman (CNI backend) with everything in the work dir:
# CONTAINERS_CONF and CONTAINERS_STORAGE_CONF, runc, cgroupfs, file events; the image
# loaded as localhost/cnirs-busybox:1. The containers' nofile/nproc limits stay under this
# machine's hard limits (podman asks for 1048576 otherwise, and runc fails to set it).
rt_podman_setup() {
    rt_podman_conf "$RT_WORK/containers.conf" "$1"
    cat >"$RT_WORK/storage.conf" <<EOC
[storage]
driver = "vfs"
graphroot = "$RT_WORK/storage"
runroot = "$RT_WORK/runroot"
EOC
    export CONTAINERS_CONF=$RT_WORK/containers.conf
    export CONTAINERS_STORAGE_CONF=$RT_WORK/storage.conf
    rt_on_exit rt_podman_teardown
    rt_image_archive "$RT_WORK/image.tar" cnirs-busybox:1
    podman load -q -i "$RT_WORK/image.tar" >/dev/null || rt_fail "podman load"
}

# rt_podman_conf <file> <plugin-dir>: a containers.conf whose CNI plugins are in plugin-dir.
rt_podman_conf() {
    cat >"$1" <<EOC
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[network]
network_backend = "cni"
cni_plugin_dirs = ["$2"]
network_config_dir = "$RT_WORK/net.d"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
tmp_dir = "$RT_WORK/tmp"
EOC
}

# Removes every container and the storage's mounts (on exit, also after a failure).
rt_podman_teardown() {
    podman rm -a -f -t 0
    podman system reset -f 2>/dev/null
}

# rt_podman_run <name> <network> [podman run options]: a detached container sleeping.
rt_podman_run() {
    local name=$1 net=$2
    shift 2
    podman run -d --name "$name" --network "$net" --cgroup-parent "$RT_CGROUP" "$@" \
        localhost/cnirs-busybox:1 \
        sleep 100000 >/dev/null || rt_fail "podman run $name on $net"
}

# rt_podman_ip <name>: the container's IPv4 address on eth0, as the container sees it.
rt_podman_ip() {
    podman exec "$1" ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1
}

# rt_ping <exec-prefix...> -- <address>: ping from inside a container.
rt_ping() {
    local args=() a
    while [[ $1 != -- ]]; do
        args+=("$1")
        shift
    done
    a=$2
    "${args[@]}" ping -c 1 -W 2 "$a" >/dev/null || rt_fail "${args[*]}: ping $a"
}

# rt_assert_clean <network> [<what>]: nothing of the network is left: no lease in its
# dataDir, no veth, no firewall rule naming CNI, no cached result.
rt_assert_clean() {
    local net=$1 what=${2:-after removal} left
    left=$(find "$RT_WORK/data/$net" -type f -regextype posix-extended \
        -regex '.*/[0-9a-f.:]+' -printf '%f ' 2>/dev/null || true)
    [[ -z $left ]] || rt_fail "$what: leases left in the dataDir: $left"
    left=$(ip -o link show type veth | awk -F': ' '{print $2}' | tr '\n' ' ')
    [[ -z $left ]] || rt_fail "$what: veths left: $left"
    left=$(iptables-save 2>/dev/null | grep -i cni || true)
    [[ -z $left ]] || rt_fail "$what: iptables rules left: $left"
    left=$(nft list ruleset 2>/dev/null | grep -i cni || true)
    [[ -z $left ]] || rt_fail "$what: nft rules left: $left"
    left=$(find /var/lib/cni -type f -path '*results*' -printf '%f ' 2>/dev/null || true)
    [[ -z $left ]] || rt_fail "$what: cached results left: $left"
    rt_log "$what: no lease, veth, rule or cached result left"
}

# rt_assert_lease <network> <ip> <container-id>: the dataDir holds the lease for ip,
# recorded for that container.
rt_assert_lease() {
    local f=$RT_WORK/data/$1/$2
    [[ -f $f ]] || rt_fail "no lease file $f"
    [[ $(head -n1 "$f" | tr -d '\r') == "$3" ]] || rt_fail "lease $f is not for $3: $(cat "$f")"
}

# rt_assert_attached <network> <n>: n attachments are visible where rt_assert_clean looks
# (n leases, n veths, a firewall rule and a cached result each), so a clean check after
# removal means the removal cleaned them.
rt_assert_attached() {
    local net=$1 n=$2 count
    count=$(find "$RT_WORK/data/$net" -type f -regextype posix-extended -regex '.*/[0-9a-f.:]+' | wc -l)
    [[ $count -eq $n ]] || rt_fail "$n leases expected in $net, found $count"
    count=$(ip -o link show type veth | wc -l)
    [[ $count -ge $n ]] || rt_fail "$n veths expected, found $count"
    count=$({ iptables-save 2>/dev/null; nft list ruleset 2>/dev/null; } | grep -ci cni || true)
    [[ $count -ge $n ]] || rt_fail "$n firewall rules expected, found $count"
    count=$(find /var/lib/cni -type f -path '*results*' | wc -l)
    [[ $count -ge $n ]] || rt_fail "$n cached results expected, found $count"
}

rt_pass() { rt_log "passed"; }

# rt_containerd_setup: a private containerd (its own root, state, socket and config in the
# work dir, CRI off), the image imported (native snapshotter: no overlay mounts to leak).
# `ctr run --cni` reads the fixed /etc/cni/net.d and /opt/cni/bin, which the sandbox
# points into the work dir.
rt_containerd_setup() {
    local d=$RT_WORK/containerd i
    mkdir -p "$d"
    cat >"$d/config.toml" <<EOC
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
EOC
    containerd --config "$d/config.toml" >"$d/log" 2>&1 &
    RT_CONTAINERD_PID=$!
    rt_on_exit rt_containerd_teardown
    export CONTAINERD_ADDRESS=$d/containerd.sock CONTAINERD_NAMESPACE=cnirs
    for i in $(seq 100); do
        ctr version >/dev/null 2>&1 && break
        kill -0 "$RT_CONTAINERD_PID" 2>/dev/null || { tail "$d/log" >&2; rt_fail "containerd died"; }
        sleep 0.1
    done
    ctr version >/dev/null || rt_fail "containerd does not answer"
    rt_image_archive "$RT_WORK/image.tar" cnirs-busybox:1
    ctr images import --snapshotter native "$RT_WORK/image.tar" >/dev/null || rt_fail "ctr import"
}

rt_containerd_teardown() {
    local id
    for id in $(ctr task ls -q 2>/dev/null); do
        ctr task kill -s KILL "$id"
    done
    sleep 0.5
    for id in $(ctr containers ls -q 2>/dev/null); do
        ctr task rm -f "$id"
        ctr containers rm "$id"
    done
    kill "$RT_CONTAINERD_PID"
    wait "$RT_CONTAINERD_PID"
}

# rt_ctr_run <id>: `ctr run --cni --rm` in the background, as an operator runs it: ctr
# ADDs before the task starts and DELs (with an empty CNI_NETNS: the task is gone) when
# it ends. Waits until the container has its address. RT_CTR_PIDS[id] = ctr's pid.
declare -A RT_CTR_PIDS
rt_ctr_run() {
    local id=$1 i
    ctr run --snapshotter native --cni --rm --null-io --cgroup "$RT_CGROUP/$id" \
        localhost/cnirs-busybox:1 "$id" sleep 100000 &
    RT_CTR_PIDS[$id]=$!
    for i in $(seq 100); do
        [[ -n $(rt_ctr_ip "$id" 2>/dev/null) ]] && return 0
        kill -0 "${RT_CTR_PIDS[$id]}" 2>/dev/null || rt_fail "ctr run $id exited"
        sleep 0.1
    done
    rt_fail "ctr run $id: no address on eth0"
}

rt_ctr_ip() {
    ctr task exec --exec-id "ip-$RANDOM" "$1" ip -4 -o addr show dev eth0 |
        awk '{print $4}' | cut -d/ -f1
}

rt_ctr_exec() {
    local id=$1
    shift
    ctr task exec --exec-id "x-$RANDOM" "$id" "$@"
}

# rt_ctr_stop <id>: ends the task; ctr then DELs and removes the container.
rt_ctr_stop() {
    local id=$1
    ctr task kill -s KILL "$id" || rt_fail "ctr task kill $id"
    wait "${RT_CTR_PIDS[$id]}" || true # ctr exits with the task's status (137)
    unset "RT_CTR_PIDS[$id]"
    ! ctr containers info "$id" >/dev/null 2>&1 || rt_fail "ctr run --rm left container $id"
}

# rt_podman_check <container> <network>: CHECK the container's attachment as libcni does
# (each plugin of the conflist gets prevResult = the result cached at ADD) with the
# plugins podman is currently configured with ($RT_WORK/plugins).
rt_podman_check() {
    local ctr=$1 net=$2 id netns cache conf out
    id=$(podman inspect -f '{{.Id}}' "$ctr")
    netns=$(podman inspect -f '{{.NetworkSettings.SandboxKey}}' "$ctr")
    cache=/var/lib/cni/results/$net-$id-eth0
    [[ -f $cache ]] || rt_fail "CHECK $ctr: no cached result $cache"
    conf=$(jq -c --slurpfile c "$cache" \
        '.plugins[0] + {name: .name, cniVersion: .cniVersion, prevResult: $c[0].result}' \
        "$RT_WORK/net.d/$net.conflist")
    out=$(CNI_COMMAND=CHECK CNI_CONTAINERID=$id CNI_NETNS=$netns CNI_IFNAME=eth0 \
        CNI_PATH=$RT_WORK/plugins "$RT_WORK/plugins/bridge" <<<"$conf" 2>&1) ||
        rt_fail "CHECK $ctr: $out"
}
