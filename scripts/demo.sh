#!/usr/bin/env bash
# The README's first command: `sudo scripts/demo.sh`.
#
# Builds the release binaries, makes a throwaway "host" network namespace and two
# "containers", brings their lo up with the loopback network (as containerd does for
# every pod) and attaches both to a bridge network (bridge + host-local, isGateway,
# ipMasq) with our cnitool, shows the results, pings container to container and to the
# gateway, runs CHECK, STATUS and GC, deletes both attachments and removes everything it
# made, also when interrupted. The plugins run inside the throwaway host namespace, so
# the machine's own network namespace (links, addresses, firewall) is never touched.
#
# Environment:
#   DEMO_PLUGINS=DIR      use the plugins in DIR instead of building ours
#                         (e.g. /usr/lib/cni for the Go reference plugins)
#   DEMO_CNI_VERSION=V    cniVersion of the demo network [default: 1.1.0 with our
#                         plugins, so STATUS and plugin GC run; 1.0.0 with
#                         DEMO_PLUGINS, as Debian's Go plugins 1.1.x stop there]
#   DEMO_SKIP_BUILD=1     use the binaries already in the target directory
#   CARGO_TARGET_DIR      where cargo builds [default: ./target]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n ${DEMO_PLUGINS:-} ]]; then
    cni_version=${DEMO_CNI_VERSION:-1.0.0}
else
    cni_version=${DEMO_CNI_VERSION:-1.1.0}
fi
target_dir=${CARGO_TARGET_DIR:-$repo/target}
bin_dir=$target_dir/release

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces): run it as 'sudo $0'"
# shellcheck source=scripts/packages.sh
source "$repo/scripts/packages.sh"
need_demo_packages || die "missing packages"
for tool in ip ping sha512sum; do
    command -v "$tool" >/dev/null || die "needs '$tool' in PATH"
done

# Names unique to this run, so two demos (or a leftover) never collide.
tag=cnidemo-$$
host_ns=$tag-host
ctr_ns=("$tag-a" "$tag-b")
work=$(mktemp -d "${TMPDIR:-/tmp}/cni-demo.XXXXXX")
made_ns=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ ${#made_ns[@]} -gt 0 ]]; then
        step "Cleaning up"
        # DEL whatever is still attached (no-op after a clean run), then the namespaces:
        # deleting the host namespace takes its bridge, veths and firewall rules with it.
        for ns in "${ctr_ns[@]}"; do
            for net in demo loopback; do
                [[ -e /run/netns/$ns ]] && in_host cnitool del "$net" "/run/netns/$ns" 2>/dev/null
            done
        done
        for ns in "${ctr_ns[@]}" "$host_ns"; do
            [[ -e /run/netns/$ns ]] && ip netns del "$ns" && echo "deleted netns $ns"
        done
    fi
    rm -rf "$work"
    if ip netns list | grep -q "^$tag-"; then
        echo "demo: namespaces left behind:" >&2
        ip netns list | grep "^$tag-" >&2
        rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command in the throwaway host namespace with the demo's CNI environment.
in_host() {
    local tool=$1
    shift
    [[ $tool == cnitool ]] && tool=$bin_dir/cnitool
    ip netns exec "$host_ns" env \
        NETCONFPATH="$work/net.d" CNI_PATH="$plugin_dir" CNI_CACHE_DIR="$work/cache" \
        "$tool" "$@"
}

# The container ID cnitool derives from a netns path (same as the Go cnitool).
container_id() { printf 'cnitool-%s' "$(printf %s "$1" | sha512sum | cut -c1-20)"; }

# The IPv4 address of eth0 in a namespace.
addr_of() { ip -n "$1" -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}'; }

build() {
    local crates=(-p cnitool)
    [[ -z ${DEMO_PLUGINS:-} ]] && crates+=(-p bridge -p host-local -p loopback)
    step "Building release binaries (${crates[*]})"
    local cargo_cmd=(cargo build --release "${crates[@]}")
    # Under sudo, build as the invoking user: their toolchain, and no root-owned target/.
    if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
        local home
        home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
        sudo -u "$SUDO_USER" -- env PATH="$home/.cargo/bin:$PATH" \
            CARGO_TARGET_DIR="$target_dir" sh -c 'cd "$1" && shift && exec "$@"' \
            sh "$repo" "${cargo_cmd[@]}"
    else
        command -v cargo >/dev/null || die "cargo not found (set DEMO_SKIP_BUILD=1 to use built binaries)"
        (cd "$repo" && CARGO_TARGET_DIR="$target_dir" "${cargo_cmd[@]}")
    fi
}

[[ -n ${DEMO_SKIP_BUILD:-} ]] || build
plugin_dir=${DEMO_PLUGINS:-$bin_dir}
for bin in "$bin_dir/cnitool" "$plugin_dir/bridge" "$plugin_dir/host-local" "$plugin_dir/loopback"; do
    [[ -x $bin ]] || die "$bin is missing"
done

step "Creating namespaces: host $host_ns, containers ${ctr_ns[*]}"
for ns in "$host_ns" "${ctr_ns[@]}"; do
    ip netns add "$ns"
    made_ns+=("$ns")
done
# The containers' lo is the loopback plugin's job.
ip -n "$host_ns" link set lo up

mkdir -p "$work/net.d" "$work/cache" "$work/ipam"
cat >"$work/net.d/10-demo.conflist" <<EOF
{
    "cniVersion": "$cni_version",
    "name": "demo",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "cnidemo0",
            "isGateway": true,
            "ipMasq": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.99.0.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": "$work/ipam"
            }
        }
    ]
}
EOF
# containerd's CRI runs this network for every pod, beside the pod network.
cat >"$work/net.d/99-loopback.conf" <<EOF
{"cniVersion": "$cni_version", "name": "loopback", "type": "loopback"}
EOF
step "Network configs in $work/net.d, plugins from $plugin_dir"
cat "$work/net.d/10-demo.conflist" "$work/net.d/99-loopback.conf"

for ns in "${ctr_ns[@]}"; do
    for net in loopback demo; do
        step "cnitool add $net /run/netns/$ns"
        in_host cnitool add "$net" "/run/netns/$ns"
        echo
    done
done
ip netns exec "${ctr_ns[0]}" ping -c 1 -W 2 127.0.0.1 >/dev/null || die "lo does not answer in ${ctr_ns[0]}"
echo "lo answers in ${ctr_ns[0]}"

ip_a=$(addr_of "${ctr_ns[0]}")
ip_b=$(addr_of "${ctr_ns[1]}")
gateway=10.99.0.1
[[ -n $ip_a && -n $ip_b ]] || die "containers got no address"

step "Ping ${ctr_ns[0]} ($ip_a) -> ${ctr_ns[1]} ($ip_b)"
ip netns exec "${ctr_ns[0]}" ping -c 2 -W 2 "$ip_b"
step "Ping ${ctr_ns[1]} ($ip_b) -> gateway ($gateway)"
ip netns exec "${ctr_ns[1]}" ping -c 2 -W 2 "$gateway"

for ns in "${ctr_ns[@]}"; do
    for net in loopback demo; do
        step "cnitool check $net /run/netns/$ns"
        in_host cnitool check "$net" "/run/netns/$ns"
        echo "ok"
    done
done

step "cnitool status demo"
in_host cnitool status demo
echo "ready (plugins are asked for cniVersion >= 1.1.0; this network is $cni_version)"

# GC with both attachments declared valid: nothing of theirs may go. (Without --valid,
# like the Go cnitool's gc, every cached attachment of the network would be deleted.)
id_a=$(container_id "/run/netns/${ctr_ns[0]}")
id_b=$(container_id "/run/netns/${ctr_ns[1]}")
step "cnitool gc demo --valid $id_a:eth0 --valid $id_b:eth0"
in_host cnitool gc demo --valid "$id_a:eth0" --valid "$id_b:eth0"
ls "$work/cache/results"
ip netns exec "${ctr_ns[0]}" ping -c 1 -W 2 "$ip_b" >/dev/null && echo "still connected after GC"

for ns in "${ctr_ns[@]}"; do
    for net in demo loopback; do
        step "cnitool del $net /run/netns/$ns"
        in_host cnitool del "$net" "/run/netns/$ns"
        echo "ok"
    done
done
[[ -z $(ls -A "$work/cache/results") ]] || die "cache entries left after DEL"
if ip -n "${ctr_ns[0]}" link show eth0 >/dev/null 2>&1; then die "eth0 left after DEL"; fi
echo "no cache entries, no eth0 left"

step "Demo passed"
