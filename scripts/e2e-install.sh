#!/usr/bin/env bash
# End to end of the cluster install on one machine (root):
#   1. static build (scripts/build-static.sh) and `podman build` of the Containerfile;
#   2. a throwaway "node" network namespace with a default route (MTU 1400) and the stub
#      API server (installer/examples/stub-apiserver.rs) on its 127.0.0.1, serving node
#      e2e-node with a dual-stack podCIDR;
#   3. the image run the way the DaemonSet runs it: temp dirs bind-mounted as the host
#      paths, NODE_NAME, KUBERNETES_SERVICE_HOST/PORT and the service-account files, every
#      capability dropped but NET_ADMIN, the node's /proc/sys/net at /host/proc/sys/net;
#      /healthz and /metrics answer on the node's 127.0.0.1:9277; a lease file older than
#      this boot is freed, a newer one kept; stopped with SIGTERM (`podman stop`), it must
#      exit 0;
#   4. the installed binaries and the generated conflist, driven by the repo's cnitool in
#      the node namespace: two container namespaces get addresses from the node's
#      podCIDRs, ping each other (IPv4 and IPv6), DEL leaves no lease, cache entry or link;
#   5. the image with --uninstall removes what it installed.
# Everything it makes (namespaces, container, image, temp dir, stub server) is removed on
# exit, also on failure. The machine's own network namespace is never touched; host-local's
# store (/var/lib/cni) is the temp dir's, bind-mounted in a private mount namespace.
#
# Environment: E2E_SKIP_BUILD=1 uses the binaries already built.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() { echo "e2e-install: FAILED: $*" >&2; exit 1; }
step() { printf '==> %s\n' "$*"; }

[[ $EUID -eq 0 ]] || die "needs root (network namespaces, podman)"
# shellcheck source=scripts/packages.sh
source scripts/packages.sh
need_install_check_packages || die "missing packages"

tag=cnirs-e2e-$$
node_ns=$tag-node
ctr_ns=("$tag-c1" "$tag-c2")
image=localhost/cni-rs:e2e-$$
container=$tag-install
work=$(mktemp -d /tmp/cnirs-e2e.XXXXXX)
made_ns=()
stub_pid=
# Debian's podman without systemd: cgroupfs and a file event log; runc, as crun refuses
# the hybrid cgroup v1/v2 layout of our CI machines.
podman() { command podman --runtime runc --cgroup-manager=cgroupfs --events-backend=file "$@"; }
# Podman raises RLIMIT_NOFILE/NPROC by default, which the CI sandbox forbids; lower is fine.
limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    podman rm -f -t 0 "$container" >/dev/null 2>&1
    podman rmi -f "$image" >/dev/null 2>&1
    [[ -n $stub_pid ]] && kill "$stub_pid" 2>/dev/null && wait "$stub_pid" 2>/dev/null
    for ns in "${made_ns[@]}"; do
        ip netns del "$ns"
    done
    rm -rf "$work"
    if ip netns list | grep -q "^$tag-"; then
        echo "e2e-install: namespaces left behind" >&2
        rc=1
    fi
    [[ $rc -eq 0 ]] && echo "e2e-install: passed" || echo "e2e-install: FAILED (rc $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

static=$repo/target/x86_64-unknown-linux-musl/release
if [[ -z ${E2E_SKIP_BUILD:-} ]]; then
    step "static build"
    scripts/build-static.sh >/dev/null
    cargo build -q -p cni-install --example stub-apiserver
fi
stub=$repo/target/debug/examples/stub-apiserver
for bin in bridge host-local loopback portmap cnitool cni-install; do
    [[ -x $static/$bin ]] || die "$static/$bin missing: run scripts/build-static.sh"
done

step "podman build (FROM scratch)"
podman build -q -f Containerfile -t "$image" "$static" >/dev/null
# Nothing but our static binaries in the image.
podman create --name "$container" "$image" >/dev/null
files=$(podman export "$container" | tar -t | grep -v '/$' | sort | tr '\n' ' ')
podman rm "$container" >/dev/null
[[ $files == "opt/cni-rs/bin/bridge opt/cni-rs/bin/host-local opt/cni-rs/bin/loopback opt/cni-rs/bin/portmap usr/local/bin/cni-install usr/local/bin/cnitool " ]] ||
    die "image content: $files"

# They run without any libc: the image has none.
for plugin in bridge host-local loopback portmap; do
    out=$(podman run --rm "${limits[@]}" --network none -e CNI_COMMAND=VERSION \
        --entrypoint "/opt/cni-rs/bin/$plugin" "$image" </dev/null)
    jq -e '.supportedVersions | index("1.0.0")' <<<"$out" >/dev/null || die "$plugin VERSION: $out"
done
out=$(podman run --rm "${limits[@]}" --network none --entrypoint /usr/local/bin/cnitool "$image" --help)
[[ $out == *Usage:* ]] || die "cnitool --help in the image: $out"

step "node namespace, default route with MTU 1400, stub API server"
ip netns add "$node_ns" && made_ns+=("$node_ns")
for ns in "${ctr_ns[@]}"; do ip netns add "$ns" && made_ns+=("$ns"); done
ip -n "$node_ns" link set lo up
ip -n "$node_ns" link add uplink mtu 1400 type veth peer name uplink-peer
ip -n "$node_ns" link set uplink up
ip -n "$node_ns" link set uplink-peer up
ip -n "$node_ns" addr add 192.0.2.1/24 dev uplink
ip -n "$node_ns" route add default via 192.0.2.254
mkdir -p "$work"/host/{opt/cni/bin,etc/cni/net.d,var/lib/cni} "$work/sa"
ip netns exec "$node_ns" "$stub" 127.0.0.1:6443 "$work/sa" e2e-node 10.88.7.0/24,fd00:88:7::/64 \
    2>"$work/stub.log" &
stub_pid=$!
for _ in $(seq 100); do [[ -e $work/sa/ready ]] && break; sleep 0.1; done
[[ -e $work/sa/ready ]] || die "stub API server did not start: $(cat "$work/stub.log")"

step "run the installer container (DaemonSet mode)"
# A lease from before this boot (freed at start) and one of a pod started since (kept).
leases=$work/host/var/lib/cni/networks/cni-rs
mkdir -p "$leases"
printf 'old\r\neth0' >"$leases/10.88.7.200"
touch -d "@$(($(awk '/^btime/ {print $2}' /proc/stat) - 3600))" "$leases/10.88.7.200"
printf 'new\r\neth0' >"$leases/10.88.7.201"
# The DaemonSet's privileges: NET_ADMIN only, /proc/sys/net of the node's namespace (the
# bind shows the namespace of whoever opens it).
agent_caps=(--cap-drop all --cap-add NET_ADMIN)
podman run -d "${limits[@]}" --name "$container" --network "ns:/run/netns/$node_ns" \
    "${agent_caps[@]}" -v /proc/sys/net:/host/proc/sys/net \
    -v "$work/host/opt/cni/bin:/host/opt/cni/bin" \
    -v "$work/host/etc/cni/net.d:/host/etc/cni/net.d" \
    -v "$work/host/var/lib/cni:/host/var/lib/cni" \
    -v "$work/sa:/var/run/secrets/kubernetes.io/serviceaccount:ro" \
    -e NODE_NAME=e2e-node -e KUBERNETES_SERVICE_HOST=127.0.0.1 -e KUBERNETES_SERVICE_PORT=6443 \
    -e CNI_RS_INTERVAL=1 -e CNI_RS_SYSCTL_DIR=/host/proc/sys \
    "$image" >/dev/null
conflist=$work/host/etc/cni/net.d/10-cni-rs.conflist
for _ in $(seq 300); do [[ -e $conflist ]] && break; sleep 0.1; done
[[ -e $conflist ]] || die "no conflist: $(podman logs "$container" 2>&1)"
health=
for _ in $(seq 50); do
    health=$(ip netns exec "$node_ns" curl -s http://127.0.0.1:9277/healthz) && break
    sleep 0.1
done
[[ $health == ok ]] || die "/healthz: $health"
ip netns exec "$node_ns" curl -s http://127.0.0.1:9277/metrics | grep -q '^cni_rs_reconciles_total' ||
    die "/metrics has no cni_rs_reconciles_total"
[[ ! -e $leases/10.88.7.200 && -e $leases/10.88.7.201 ]] ||
    die "lease cleanup: $(ls "$leases")"
rm "$leases/10.88.7.201"
podman stop -t 20 "$container" >/dev/null
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$container")
podman logs "$container" 2>&1 | sed 's/^/    /'
podman rm "$container" >/dev/null
[[ $exit_code == 0 ]] || die "the installer exited $exit_code on SIGTERM"
[[ $(ls "$work/host/opt/cni/bin" | tr '\n' ' ') == "bridge host-local loopback portmap " ]] ||
    die "bin dir: $(ls -a "$work/host/opt/cni/bin")"
grep -q '"mtu": 1400' "$conflist" || die "conflist MTU is not the default route's: $(cat "$conflist")"
jq -e '.plugins[0].ipMasq == false' "$conflist" >/dev/null || die "the bridge masquerades: $(cat "$conflist")"
echo "    $(jq -c . "$conflist")"

# cnitool in the node namespace, with the node's /var/lib/cni being the temp dir's.
in_node() {
    ip netns exec "$node_ns" unshare --mount --propagation private sh -c \
        'mount --bind "$0" /var/lib && exec "$@"' "$work/host/var/lib" \
        env NETCONFPATH="$work/host/etc/cni/net.d" CNI_PATH="$work/host/opt/cni/bin" "$@"
}

step "two containers on the generated conflist"
declare -A ip4 ip6
for ns in "${ctr_ns[@]}"; do
    result=$(in_node "$static/cnitool" add cni-rs "/run/netns/$ns")
    ip4[$ns]=$(jq -r '.ips[] | .address | select(test("^10\\.88\\.7\\.")) | sub("/.*"; "")' <<<"$result")
    ip6[$ns]=$(jq -r '.ips[] | .address | select(test("^fd00:88:7:")) | sub("/.*"; "")' <<<"$result")
    [[ -n ${ip4[$ns]} && -n ${ip6[$ns]} ]] || die "$ns: no address from the podCIDRs: $result"
    [[ $(ip -n "$ns" -j link show eth0 | jq '.[0].mtu') == 1400 ]] || die "$ns: eth0 MTU"
    echo "    $ns: ${ip4[$ns]} ${ip6[$ns]}"
done
[[ ${ip4[${ctr_ns[0]}]} != "${ip4[${ctr_ns[1]}]}" ]] || die "both containers got the same address"
ip netns exec "${ctr_ns[0]}" ping -c 2 -W 2 "${ip4[${ctr_ns[1]}]}" >/dev/null || die "IPv4 ping"
ok=
for _ in $(seq 20); do  # until DAD is over on the containers' addresses
    ip netns exec "${ctr_ns[0]}" ping -6 -c 1 -W 1 "${ip6[${ctr_ns[1]}]}" >/dev/null && ok=1 && break
    sleep 0.2
done
[[ -n $ok ]] || die "IPv6 ping"
echo "    ${ctr_ns[0]} -> ${ctr_ns[1]}: IPv4 and IPv6 ping ok"

step "DEL leaves nothing"
for ns in "${ctr_ns[@]}"; do in_node "$static/cnitool" del cni-rs "/run/netns/$ns"; done
leases=$(find "$work/host/var/lib/cni/networks/cni-rs" -type f -name '*[.:]*' ! -name 'last_reserved_ip.*' ! -name 'index.host-local')
[[ -z $leases ]] || die "leases left: $leases"
cached=$(find "$work/host/var/lib/cni/results" -type f 2>/dev/null)
[[ -z $cached ]] || die "cached results left: $cached"
for ns in "${ctr_ns[@]}"; do
    [[ $(ip -n "$ns" -o link show | awk -F': ' '{print $2}') == lo ]] || die "$ns: links left"
done
veths=$(ip -n "$node_ns" -o link show type veth | grep -v uplink || true)
[[ -z $veths ]] || die "host veths left: $veths"

step "uninstall"
podman run --rm "${limits[@]}" --network "ns:/run/netns/$node_ns" "${agent_caps[@]}" \
    -v "$work/host/opt/cni/bin:/host/opt/cni/bin" \
    -v "$work/host/etc/cni/net.d:/host/etc/cni/net.d" \
    "$image" --uninstall 2>&1 | sed 's/^/    /'
[[ -z $(ls -A "$work/host/opt/cni/bin" "$work/host/etc/cni/net.d" | grep -v ':$' | grep .) ]] ||
    die "uninstall left: $(ls -A "$work/host/opt/cni/bin" "$work/host/etc/cni/net.d")"
