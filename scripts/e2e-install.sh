#!/usr/bin/env bash
# End to end of the cluster install on one machine (root), through the image:
#   1. static build (scripts/build-static.sh) and `podman build` of the Containerfile;
#      the image holds our static binaries only, and they run without a libc;
#   2. a cluster of throwaway namespaces: three "nodes" on a lan (a bridge in its own
#      namespace, MTU 1400), each with rp_filter=1 and dual-stack lan addresses and default routes via an
#      "outside" host, where the stub API server (agent/examples/stub-apiserver.rs)
#      serves the three Nodes, each with its own dual-stack podCIDR and InternalIPs;
#   3. on every node, the image run the way the DaemonSet runs it: temp dirs bind-mounted
#      as the host paths, NODE_NAME, KUBERNETES_SERVICE_HOST/PORT and the service-account
#      files, every capability dropped but NET_ADMIN, a read-only root, the node's
#      /proc/sys/net at /host/proc/sys/net; /readyz, /healthz and /metrics answer on the
#      node's 127.0.0.1:9277; each node routes (protocol 0xcb) every other node's podCIDRs
#      via its InternalIP, both families, and has the masquerade table `inet cni-rs`; on
#      node 1 a lease file older than this boot is freed, a newer one kept; the conflists
#      carry the lan's MTU and leave masquerading to the agent;
#   4. the installed binaries and the generated conflists, driven by the repo's cnitool in
#      the node namespaces: two pods on node 1 ping each other, and one pings a pod on node
#      2 (IPv4 and IPv6) that sees the sender's pod address (no NAT); the pod on node 2
#      has hostPort 8080 (portmap's nftables backend, as the agent's
#      CNI_RS_PORTMAP_BACKEND asks), reached from node 1 and from outside; DEL leaves no
#      lease, cache entry, hostPort rule or link;
#   5. NetworkPolicy through the image: with the pods and two policies in the API, a pod on
#      node 1 no longer reaches one on node 2 (across nodes) nor its neighbour on node 1's
#      bridge, both families, while the allowed pair still talks; deleted, all talk again;
#   6. a Node deleted in the API server loses its routes on the other nodes;
#   7. stopped with SIGTERM (`podman stop`) every agent exits 0 and leaves its routes and
#      tables in place; the image with --uninstall then removes the files, routes and tables
#      it made.
# Everything it makes (namespaces, containers, image, temp dir, stub server) is removed on
# exit, also on failure. The machine's own network namespace is never touched; host-local's
# store (/var/lib/cni) is each node's temp dir, bind-mounted in a private mount namespace.
#
# Environment: E2E_SKIP_BUILD=1 uses the binaries already built; CARGO_TARGET_DIR as cargo's.
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
lan_ns=$tag-lan
ext_ns=$tag-ext # the outside host, with the API server
nodes=(1 2 3)
image=localhost/cni-rs:e2e-$$
work=$(mktemp -d /tmp/cnirs-e2e.XXXXXX)
made_ns=()
containers=()
stub_pid=
hostport_pid=
# Debian's podman without systemd: cgroupfs and a file event log; runc, as crun refuses
# the hybrid cgroup v1/v2 layout of our CI machines.
podman() { command podman --runtime runc --cgroup-manager=cgroupfs --events-backend=file "$@"; }
# Podman raises RLIMIT_NOFILE/NPROC by default, which the CI sandbox forbids; lower is fine.
limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    for c in "${containers[@]}"; do
        podman container exists "$c" || continue
        if [[ $rc -ne 0 ]]; then
            echo "--- $c:" >&2
            podman logs "$c" 2>&1 | tail -n 30 >&2
        fi
        podman rm -f -t 0 "$c" >/dev/null 2>&1
    done
    podman rmi -f "$image" >/dev/null 2>&1
    [[ -n $stub_pid ]] && kill "$stub_pid" 2>/dev/null && wait "$stub_pid" 2>/dev/null
    [[ -n $hostport_pid ]] && kill "$hostport_pid" 2>/dev/null && wait "$hostport_pid" 2>/dev/null
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

target=${CARGO_TARGET_DIR:-$repo/target}
static=$target/x86_64-unknown-linux-musl/release
if [[ -z ${E2E_SKIP_BUILD:-} ]]; then
    step "static build"
    scripts/build-static.sh >/dev/null
    cargo build -q -p cni-rs-agent --example stub-apiserver
fi
stub=$target/debug/examples/stub-apiserver
for bin in bridge host-local loopback portmap cnitool cni-rs-agent; do
    [[ -x $static/$bin ]] || die "$static/$bin missing: run scripts/build-static.sh"
done
[[ -x $stub ]] || die "$stub missing: cargo build -p cni-rs-agent --example stub-apiserver"

step "podman build (FROM scratch)"
podman build -q -f Containerfile -t "$image" "$static" >/dev/null
# Nothing but our static binaries in the image.
containers+=("$tag-export")
podman create --name "$tag-export" "$image" >/dev/null
files=$(podman export "$tag-export" | tar -t | grep -v '/$' | sort | tr '\n' ' ')
podman rm "$tag-export" >/dev/null
[[ $files == "opt/cni-rs/bin/bridge opt/cni-rs/bin/host-local opt/cni-rs/bin/loopback opt/cni-rs/bin/portmap usr/local/bin/cni-install usr/local/bin/cni-rs-agent usr/local/bin/cnitool " ]] ||
    die "image content: $files"

# They run without any libc: the image has none.
for plugin in bridge host-local loopback portmap; do
    out=$(podman run --rm "${limits[@]}" --network none -e CNI_COMMAND=VERSION \
        --entrypoint "/opt/cni-rs/bin/$plugin" "$image" </dev/null)
    jq -e '.supportedVersions | index("1.0.0")' <<<"$out" >/dev/null || die "$plugin VERSION: $out"
done
out=$(podman run --rm "${limits[@]}" --network none --entrypoint /usr/local/bin/cnitool "$image" --help)
[[ $out == *Usage:* ]] || die "cnitool --help in the image: $out"

# Node i: lan addresses 198.51.100.1i and fd00:100::1i, podCIDRs 10.88.i.0/24 and
# fd00:88:i::/64, host dirs under $work/ni.
ns_of() { echo "$tag-n$1"; }
lan4() { echo "198.51.100.1$1"; }
lan6() { echo "fd00:100::1$1"; }
pod4() { echo "10.88.$1.0/24"; }
pod6() { echo "fd00:88:$1::/64"; }
host() { echo "$work/n$1"; }
ext4=198.51.100.200
ext6=fd00:100::c8

new_ns() { ip netns add "$1" && made_ns+=("$1") && ip -n "$1" link set lo up; }
# A veth from the lan bridge to eth0 in namespace $1 (MTU 1400), with addresses $3 and $4.
plug() {
    ip -n "$lan_ns" link add "$2" mtu 1400 type veth peer name eth0 netns "$1"
    ip -n "$lan_ns" link set "$2" master lan0 up
    ip -n "$1" link set eth0 mtu 1400 up
    ip -n "$1" addr add "$3/24" dev eth0
    ip -n "$1" addr add "$4/64" dev eth0 nodad
}

step "cluster: ${#nodes[@]} nodes on a lan, the stub API server outside"
new_ns "$lan_ns"
ip -n "$lan_ns" link add lan0 type bridge
ip -n "$lan_ns" link set lan0 up
new_ns "$ext_ns"
plug "$ext_ns" mext "$ext4" "$ext6"
for i in "${nodes[@]}"; do
    ns=$(ns_of "$i")
    new_ns "$ns"
    plug "$ns" "m$i" "$(lan4 "$i")" "$(lan6 "$i")"
    ip -n "$ns" route add default via "$ext4"
    # Strict reverse-path filtering (RHEL's default), on every interface made later too.
    for conf in all default eth0; do ip netns exec "$ns" sysctl -qw "net.ipv4.conf.$conf.rp_filter=1"; done
    ip -n "$ns" -6 route add default via "$ext6"
    mkdir -p "$(host "$i")"/{opt/cni/bin,etc/cni/net.d,var/lib/cni}
done
mkdir -p "$work/sa"
mkfifo "$work/stub.in"
ip netns exec "$ext_ns" "$stub" "$ext4:6443" "$work/sa" e2e-node-1 "$(pod4 1),$(pod6 1)" \
    <"$work/stub.in" 2>"$work/stub.log" &
stub_pid=$!
exec {stub_in}>"$work/stub.in"
for _ in $(seq 100); do [[ -e $work/sa/ready ]] && break; sleep 0.1; done
[[ -e $work/sa/ready ]] || die "stub API server did not start: $(cat "$work/stub.log")"
# Commands to the stub (see its header): every node with its podCIDRs and InternalIPs.
stub_cmd() { echo "$*" >&"$stub_in"; }
for i in "${nodes[@]}"; do
    stub_cmd put "e2e-node-$i" "$(pod4 "$i"),$(pod6 "$i")" "$(lan4 "$i"),$(lan6 "$i")"
done

# The routes (protocol 0xcb) node $1 holds, and those it should hold with the nodes $2...
# in the API server, as sorted "dst via gateway" lines.
routes() {
    { ip -n "$(ns_of "$1")" -4 route show proto 0xcb; ip -n "$(ns_of "$1")" -6 route show proto 0xcb; } |
        sed 's/ nhid [0-9]*//' | awk '{print $1, $2, $3}' | sort
}
want_routes() {
    local self=$1 j
    shift
    for j in "$@"; do
        [[ $j == "$self" ]] && continue
        echo "$(pod4 "$j") via $(lan4 "$j")"
        echo "$(pod6 "$j") via $(lan6 "$j")"
    done | sort
}
# Waits up to 30 s until node $1's routes are those of want_routes "$@".
wait_routes() {
    local want
    want=$(want_routes "$@")
    for _ in $(seq 300); do
        [[ $(routes "$1") == "$want" ]] && return 0
        sleep 0.1
    done
    die "node $1 routes: $(routes "$1" | tr '\n' ';'), want: $(tr '\n' ';' <<<"$want")"
}
http_code() { ip netns exec "$(ns_of "$1")" curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:9277/$2"; }
node_metric() { ip netns exec "$(ns_of "$1")" curl -s http://127.0.0.1:9277/metrics | awk -v m="$2" '$1 == m {print $2}'; }
has_table() { ip netns exec "$(ns_of "$1")" nft list table inet cni-rs >/dev/null 2>&1; }

step "the installer container on every node (DaemonSet mode)"
# A lease from before this boot (freed at start) and one of a pod started since (kept);
# the store was cleaned last in an earlier boot (its boot_id recorded beside the leases).
leases=$(host 1)/var/lib/cni/networks/cni-rs
mkdir -p "$leases"
printf '# cni-install: leases of boots before this one were freed; not a lease #\nan-earlier-boot\n' \
    >"$leases/boot_id.cni-install"
printf 'old\r\neth0' >"$leases/10.88.1.200"
touch -d "@$(($(awk '/^btime/ {print $2}' /proc/stat) - 3600))" "$leases/10.88.1.200"
printf 'new\r\neth0' >"$leases/10.88.1.201"
# The DaemonSet's privileges: NET_ADMIN only, a read-only root, /proc/sys/net of the
# node's namespace (the bind shows the namespace of whoever opens it).
agent_caps=(--cap-drop all --cap-add NET_ADMIN --read-only)
for i in "${nodes[@]}"; do
    containers+=("$tag-n$i")
    podman run -d "${limits[@]}" --name "$tag-n$i" --network "ns:/run/netns/$(ns_of "$i")" \
        "${agent_caps[@]}" -v /proc/sys/net:/host/proc/sys/net \
        -v "$(host "$i")/opt/cni/bin:/host/opt/cni/bin" \
        -v "$(host "$i")/etc/cni/net.d:/host/etc/cni/net.d" \
        -v "$(host "$i")/var/lib/cni:/host/var/lib/cni" \
        -v "$work/sa:/var/run/secrets/kubernetes.io/serviceaccount:ro" \
        -e NODE_NAME="e2e-node-$i" -e KUBERNETES_SERVICE_HOST="$ext4" -e KUBERNETES_SERVICE_PORT=6443 \
        -e CNI_RS_INTERVAL=1 -e CNI_RS_SYSCTL_DIR=/host/proc/sys -e CNI_RS_PORTMAP_BACKEND=nftables \
        "$image" >/dev/null
done
for i in "${nodes[@]}"; do
    wait_routes "$i" "${nodes[@]}"
    ready=
    for _ in $(seq 100); do
        ready=$(http_code "$i" readyz) && [[ $ready == 200 ]] && break
        sleep 0.1
    done
    [[ $ready == 200 ]] || die "node $i /readyz: $ready"
    [[ $(ip netns exec "$(ns_of "$i")" curl -s http://127.0.0.1:9277/healthz) == ok ]] ||
        die "node $i /healthz"
    ip netns exec "$(ns_of "$i")" curl -s http://127.0.0.1:9277/metrics | grep -c '^cni_rs_reconciles_total' >/dev/null ||
        die "node $i /metrics has no cni_rs_reconciles_total"
    has_table "$i" || die "node $i has no table inet cni-rs"
    conflist=$(host "$i")/etc/cni/net.d/10-cni-rs.conflist
    bins=$(find "$(host "$i")/opt/cni/bin" -mindepth 1 -printf '%f ' | tr ' ' '\n' | sort | tr '\n' ' ')
    [[ $bins == "bridge host-local loopback portmap " ]] || die "node $i bin dir: $bins"
    grep -q '"mtu": 1400' "$conflist" || die "node $i conflist MTU is not the lan's: $(cat "$conflist")"
    jq -e '.plugins[0].ipMasq == false' "$conflist" >/dev/null || die "node $i: the bridge masquerades: $(cat "$conflist")"
    echo "    node $i ready: $(routes "$i" | tr '\n' ';')"
done
[[ ! -e $leases/10.88.1.200 && -e $leases/10.88.1.201 ]] ||
    die "lease cleanup: $(ls "$leases")"
rm "$leases/10.88.1.201"
echo "    $(jq -c . "$(host 1)/etc/cni/net.d/10-cni-rs.conflist")"

# cnitool in node $1's namespace, with the node's /var/lib/cni being its temp dir's.
in_node() {
    local i=$1
    shift
    # shellcheck disable=SC2016 # expanded by that sh
    ip netns exec "$(ns_of "$i")" unshare --mount --propagation private sh -c \
        'mount --bind "$0" /var/lib && exec "$@"' "$(host "$i")/var/lib" \
        env NETCONFPATH="$(host "$i")/etc/cni/net.d" CNI_PATH="$(host "$i")/opt/cni/bin" "$@"
}
# Pings $2 from namespace $1 until it answers (DAD may still hold the addresses).
ping_ok() {
    for _ in $(seq 25); do
        ip netns exec "$1" ping -c 1 -W 1 "$2" >/dev/null && return 0
        sleep 0.2
    done
    return 1
}

step "pods on the generated conflists: two on node 1, one on node 2 (with a hostPort)"
pods=("$tag-c1:1" "$tag-c2:1" "$tag-c3:2") # namespace:node
# The pod on node 2 maps hostPort 8080 to its port 80 (portmap, nftables backend).
caps() { if [[ $1 == "$tag-c3" ]]; then echo '{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}'; else echo '{}'; fi; }
declare -A ip4 ip6
for pod in "${pods[@]}"; do
    ns=${pod%:*} i=${pod#*:}
    new_ns "$ns"
    result=$(in_node "$i" env CAP_ARGS="$(caps "$ns")" "$static/cnitool" add cni-rs "/run/netns/$ns")
    ip4[$ns]=$(jq -r --arg p "10.88.$i." '.ips[] | .address | select(startswith($p)) | sub("/.*"; "")' <<<"$result")
    ip6[$ns]=$(jq -r --arg p "fd00:88:$i:" '.ips[] | .address | select(startswith($p)) | sub("/.*"; "")' <<<"$result")
    [[ -n ${ip4[$ns]} && -n ${ip6[$ns]} ]] || die "$ns: no address from node $i's podCIDRs: $result"
    [[ $(ip -n "$ns" -j link show eth0 | jq '.[0].mtu') == 1400 ]] || die "$ns: eth0 MTU"
    echo "    $ns on node $i: ${ip4[$ns]} ${ip6[$ns]}"
done
c1=$tag-c1 c2=$tag-c2 c3=$tag-c3
[[ ${ip4[$c1]} != "${ip4[$c2]}" ]] || die "both pods of node 1 got the same address"
ping_ok "$c1" "${ip4[$c2]}" || die "IPv4 ping on node 1"
ping_ok "$c1" "${ip6[$c2]}" || die "IPv6 ping on node 1"
echo "    $c1 -> $c2 (node 1): IPv4 and IPv6 ping ok"
# The receiver counts the echo requests that arrive from the sender's pod addresses: with
# NAT they would come from node 1's address instead.
ip netns exec "$c3" nft -f - <<EOF
table inet e2e {
    chain input {
        type filter hook input priority 0;
        ip saddr ${ip4[$c1]} icmp type echo-request counter
        ip6 saddr ${ip6[$c1]} icmpv6 type echo-request counter
    }
}
EOF
ping_ok "$c1" "${ip4[$c3]}" || die "IPv4 ping from node 1 to node 2"
ping_ok "$c1" "${ip6[$c3]}" || die "IPv6 ping from node 1 to node 2"
seen=$(ip netns exec "$c3" nft -j list chain inet e2e input |
    jq -c '[.nftables[] | .rule? // empty | .expr[] | .counter? // empty | .packets]')
[[ $seen =~ ^\[[1-9][0-9]*,[1-9][0-9]*\]$ ]] ||
    die "$c3 saw no echo request from $c1's pod addresses (NAT?): $(ip netns exec "$c3" nft list table inet e2e)"
echo "    $c1 (node 1) -> $c3 (node 2): IPv4 and IPv6 ping ok, from the pod addresses"

# A TCP server in pod c3 that answers each connection with its name.
ip netns exec "$c3" python3 -c '
import socket, sys
s = socket.create_server(("0.0.0.0", 80))
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[1].encode() + b"\n")
    c.close()
' "$c3" 2>"$work/hostport.log" &
hostport_pid=$!
# hostPort 8080 on node 2, from node 1 and from the outside host (both reach node 2 over
# the lan, under rp_filter=1).
for from in "$(ns_of 1)" "$ext_ns"; do
    got=
    for _ in $(seq 25); do
        got=$(ip netns exec "$from" curl -s --max-time 2 "telnet://$(lan4 2):8080" </dev/null || true)
        [[ $got == "$c3" ]] && break
        sleep 0.2
    done
    [[ $got == "$c3" ]] || die "hostPort 8080 on node 2 from $from: got '$got' ($(cat "$work/hostport.log"))"
done
kill "$hostport_pid"
wait "$hostport_pid" 2>/dev/null || true
hostport_pid=
# grep -c, not -q, after nft, curl or iptables-save: with pipefail, -q leaves at the first
# match and the writer, still writing, dies of SIGPIPE (nft flushes each line; measured:
# 3 of 200 listings failed that way).
ip netns exec "$(ns_of 2)" nft list table ip cni_hostport | grep -cF "${ip4[$c3]}" >/dev/null ||
    die "node 2: no nftables hostPort rule for ${ip4[$c3]}: $(ip netns exec "$(ns_of 2)" nft list ruleset)"
echo "    hostPort 8080 on node 2 reaches $c3 from node 1 and from outside (nftables backend)"

step "NetworkPolicy through the image: across nodes and across node 1's bridge"
# The three pods as the API shows them (namespace e2e), then two policies: c3 (node 2)
# admits only c2, and c2 (node 1) admits nothing; c1 then reaches neither.
stub_cmd object namespace '{"metadata":{"name":"e2e"}}'
for pod in "${pods[@]}"; do
    ns=${pod%:*} i=${pod#*:} app=${pod%:*}
    app=${app##*-}
    stub_cmd object pod "{\"metadata\":{\"name\":\"$app\",\"namespace\":\"e2e\",\"labels\":{\"app\":\"$app\"}},\"spec\":{\"nodeName\":\"e2e-node-$i\"},\"status\":{\"phase\":\"Running\",\"podIPs\":[{\"ip\":\"${ip4[$ns]}\"},{\"ip\":\"${ip6[$ns]}\"}]}}"
done
stub_cmd object networkpolicy '{"metadata":{"name":"c3-from-c2","namespace":"e2e"},"spec":{"podSelector":{"matchLabels":{"app":"c3"}},"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"c2"}}}]}]}}'
stub_cmd object networkpolicy '{"metadata":{"name":"c2-deny","namespace":"e2e"},"spec":{"podSelector":{"matchLabels":{"app":"c2"}}}}'
# Pings $2 from namespace $1 until it gets no answer (the policy is programmed).
ping_denied() {
    for _ in $(seq 50); do
        ip netns exec "$1" ping -c 1 -W 1 "$2" >/dev/null || return 0
        sleep 0.1
    done
    return 1
}
for addr in "${ip4[$c3]}" "${ip6[$c3]}"; do
    ping_denied "$c1" "$addr" || die "c1 still reaches c3 ($addr) across nodes: $(ip netns exec "$(ns_of 2)" nft list table inet cni-rs-netpol)"
    ping_ok "$c2" "$addr" || die "c2 no longer reaches c3 ($addr)"
done
for addr in "${ip4[$c2]}" "${ip6[$c2]}"; do
    ping_denied "$c1" "$addr" || die "c1 still reaches c2 ($addr) on node 1's bridge: $(ip netns exec "$(ns_of 1)" nft list table inet cni-rs-netpol)"
done
for i in 1 2; do
    [[ $(node_metric "$i" cni_rs_netpol_in_place) == 1 ]] || die "node $i: policies not in place"
done
echo "    c1 -> c3 (node 2) and c1 -> c2 (node 1, bridged) denied, c2 -> c3 allowed, both families"
stub_cmd delete networkpolicy e2e c3-from-c2
stub_cmd delete networkpolicy e2e c2-deny
for addr in "${ip4[$c3]}" "${ip6[$c3]}" "${ip4[$c2]}" "${ip6[$c2]}"; do
    ping_ok "$c1" "$addr" || die "c1 does not reach $addr after the policies were deleted"
done
echo "    policies deleted: c1 reaches c2 and c3 again"

step "DEL leaves nothing"
for pod in "${pods[@]}"; do
    in_node "${pod#*:}" env CAP_ARGS="$(caps "${pod%:*}")" "$static/cnitool" del cni-rs "/run/netns/${pod%:*}"
done
! ip netns exec "$(ns_of 2)" nft list table ip cni_hostport 2>/dev/null | grep -cF "${ip4[$c3]}" >/dev/null ||
    die "node 2: DEL left the hostPort rules of ${ip4[$c3]}"
for i in 1 2; do
    left=$(find "$(host "$i")/var/lib/cni/networks/cni-rs" -type f -name '*[.:]*' ! -name 'last_reserved_ip.*' ! -name 'index.host-local' ! -name 'boot_id.cni-install')
    [[ -z $left ]] || die "node $i leases left: $left"
    cached=$(find "$(host "$i")/var/lib/cni/results" -type f 2>/dev/null)
    [[ -z $cached ]] || die "node $i cached results left: $cached"
    veths=$(ip -n "$(ns_of "$i")" -o link show type veth | grep -v 'eth0@' || true)
    [[ -z $veths ]] || die "node $i host veths left: $veths"
done
for pod in "${pods[@]}"; do
    [[ $(ip -n "${pod%:*}" -o link show | awk -F': ' '{print $2}') == lo ]] || die "${pod%:*}: links left"
done

step "a Node deleted in the API server loses its routes"
stub_cmd del e2e-node-3
wait_routes 1 1 2
wait_routes 2 1 2
echo "    node 1: $(routes 1 | tr '\n' ';') node 2: $(routes 2 | tr '\n' ';')"

step "SIGTERM, then uninstall"
for i in "${nodes[@]}"; do
    podman stop -t 20 "$tag-n$i" >/dev/null
    exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$tag-n$i")
    [[ $exit_code == 0 ]] || die "node $i: the installer exited $exit_code on SIGTERM"
done
podman logs "$tag-n1" 2>&1 | sed 's/^/    node 1: /'
# Stopping the agent (a rolling update) leaves pods' traffic working.
if [[ $(routes 1) != "$(want_routes 1 1 2)" ]] || ! has_table 1; then
    die "node 1 lost its routes or table on SIGTERM"
fi
for i in "${nodes[@]}"; do
    podman rm "$tag-n$i" >/dev/null
    podman run --rm "${limits[@]}" --network "ns:/run/netns/$(ns_of "$i")" "${agent_caps[@]}" \
        -v "$(host "$i")/opt/cni/bin:/host/opt/cni/bin" \
        -v "$(host "$i")/etc/cni/net.d:/host/etc/cni/net.d" \
        "$image" --uninstall 2>&1 | sed "s/^/    node $i: /"
    left=$(find "$(host "$i")/opt/cni/bin" "$(host "$i")/etc/cni/net.d" -mindepth 1)
    [[ -z $left ]] || die "node $i: uninstall left: $left"
    [[ -z $(routes "$i") ]] || die "node $i: uninstall left routes: $(routes "$i")"
    ! has_table "$i" || die "node $i: uninstall left the table inet cni-rs"
    ! ip netns exec "$(ns_of "$i")" nft list table inet cni-rs-netpol >/dev/null 2>&1 ||
        die "node $i: uninstall left the table inet cni-rs-netpol"
done
