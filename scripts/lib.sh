# shellcheck shell=bash
# Sourced by the bench scripts: a temp work dir and throwaway network namespaces, both
# removed when the script exits (also on an error), and a median.

BENCH_NETNS=()

# make_work <name>: WORK=/tmp/<name>.XXXXXX, removed on exit with every make_netns namespace.
make_work() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    trap bench_cleanup EXIT
}

# make_netns <name>: `ip netns add`, deleted on exit.
make_netns() {
    ip netns add "$1"
    BENCH_NETNS+=("$1")
}

bench_cleanup() {
    local ns
    for ns in "${BENCH_NETNS[@]}"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$WORK"
}

# median_ms: the median of the microsecond values on stdin, in ms with one decimal.
median_ms() {
    sort -n | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m / 1000}'
}
