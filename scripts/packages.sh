# shellcheck shell=bash
# Sourced by demo.sh and test.sh: installs the OS packages they need, only when missing,
# saying what and why. Debian packages through apt-get; elsewhere a clear error naming them.
#
# Environment:
#   CNI_RS_GO_PLUGINS=DIR   where the Go reference plugins are [default: /usr/lib/cni]
#   CNI_RS_BUSYBOX=FILE     the static busybox of the runtime tests' image [default: /bin/busybox]

# need_packages <why> <command-or-/path>:<debian-package>...
# A requirement is met when the command is in PATH (or, for an absolute path, the file
# exists); the packages of the unmet ones are installed in one apt-get run.
need_packages() {
    local why=$1 req what pkg missing=()
    shift
    for req in "$@"; do
        what=${req%%:*}
        pkg=${req#*:}
        if [[ $what == /* ]]; then
            [[ -e $what ]] && continue
        else
            command -v "$what" >/dev/null 2>&1 && continue
        fi
        [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: missing packages for $why (Debian names): ${missing[*]}; install them with your package manager" >&2
        return 1
    fi
    if [[ $(id -u) -ne 0 ]]; then
        echo "error: missing packages for $why: ${missing[*]}; run as root to install them, or: sudo apt-get install ${missing[*]}" >&2
        return 1
    fi
    echo "installing ${missing[*]} ($why)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
}

# What the demo runs: ip, ping, and iptables for its ipMasq.
need_demo_packages() {
    need_packages "the demo" ip:iproute2 ping:iputils-ping iptables:iptables
}

# What the tests run: the demo's, nft, conntrack (portmap clears stale UDP flows with
# it), the Go reference plugins they compare with, and make (the agent's allocator,
# jemalloc, is built from source).
need_test_packages() {
    need_packages "the tests" ip:iproute2 ping:iputils-ping iptables:iptables \
        iptables-restore:iptables nft:nftables conntrack:conntrack \
        "${CNI_RS_GO_PLUGINS:-/usr/lib/cni}/bridge:containernetworking-plugins" make:make
}

# What the cluster-install checks run: musl-gcc and make for the static build (ring and
# jemalloc compile C), podman + runc for the image end to end, jq, nft, ping and curl for
# its checks, Debian's python3 with the Kubernetes models for the manifest check.
need_install_check_packages() {
    need_packages "the cluster install checks" musl-gcc:musl-tools make:make podman:podman runc:runc \
        jq:jq nft:nftables ping:iputils-ping curl:curl ip:iproute2 \
        /usr/lib/python3/dist-packages/kubernetes:python3-kubernetes \
        /usr/lib/python3/dist-packages/yaml:python3-yaml
}

# What the runtime tests (runtime-*.sh, live-switch.sh) run: podman and a containerd with
# runc, busybox-static for their image, jq for CHECK, the firewall tools they inspect,
# and the Go plugins for the live switch.
need_runtime_packages() {
    need_packages "the runtime tests" ip:iproute2 iptables-save:iptables nft:nftables \
        podman:podman containerd:containerd ctr:containerd runc:runc jq:jq \
        "${CNI_RS_BUSYBOX:-/bin/busybox}:busybox-static" \
        "${CNI_RS_GO_PLUGINS:-/usr/lib/cni}/bridge:containernetworking-plugins"
}
