#!/usr/bin/env bash
# The project's test command: format, build, lint, test, then check that the
# tests left nothing behind on the machine.
#
# Privileged tests (namespaces, links, firewall rules) need root: run this as
# root. Not root, they print "skipping <test>: needs root" and pass, unless
# CI is set, in which case they fail.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/packages.sh
source scripts/packages.sh
# Not root outside CI, the tests that need a missing tool skip (with a message) instead.
need_test_packages || [[ $EUID -ne 0 && -z ${CI:-} ]]
if [[ $EUID -eq 0 || -n ${CI:-} ]]; then need_runtime_packages; fi

state_dirs=(/var/lib/cni/networks /var/lib/cni/results)

# What exists before the tests, so only new things count as leaks.
snapshot() {
    echo "== files"
    find "${state_dirs[@]}" -mindepth 1 2>/dev/null | sort || true
    echo "== links"
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | sort || true
    if command -v nft >/dev/null; then
        echo "== nft"
        nft list ruleset 2>/dev/null || true
    fi
}

leak_check() {
    local ok=0 leaked_ns
    leaked_ns=$(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cnirs-' || true)
    if [[ -n "$leaked_ns" ]]; then
        echo "LEAK: test network namespaces left behind:" >&2
        echo "$leaked_ns" | sed 's/^/  /' >&2
        # Remove them so the next run starts clean; this run still fails.
        while read -r ns; do ip netns del "$ns" || true; done <<<"$leaked_ns"
        ok=1
    fi
    local after
    after=$(snapshot)
    if [[ "$after" != "$before" ]]; then
        echo "LEAK: the machine's state changed during the tests (+ new, - gone):" >&2
        diff <(echo "$before") <(echo "$after") | grep '^[<>]' |
            sed 's/^</  -/; s/^>/  +/' >&2 || true
        ok=1
    fi
    return "$ok"
}

before=$(snapshot)

cargo fmt --all --check
cargo build --workspace --bins
cargo clippy --workspace --all-targets -- -D warnings
# The code that exists only in the crash tests' fault-injection builds.
cargo clippy -p sysproc -p bridge -p host-local --features fault-injection --target-dir target/faults -- -D warnings

status=0
# Privileged tests are marked #[ignore = "needs root"] (so a run without root reports them as
# ignored, not passed): here they run too, and skip with a message without root, or fail
# when CI is set (testkit::privileged).
RUST_BACKTRACE="${RUST_BACKTRACE:-1}" cargo test --workspace --no-fail-fast -- --include-ignored || status=$?
# That every privileged test carries the mark: as a user without root, each one must be
# reported ignored (an unmarked one panics in the gate). Only the unprivileged tests run.
if ! env -u CI CNIRS_UNPRIVILEGED=1 cargo test --workspace --no-fail-fast -q >/tmp/cni-rs-marks.log 2>&1; then
    status=1
    echo "privileged tests without their #[ignore = \"needs root\"] mark:" >&2
    grep -E 'is not marked|panicked' /tmp/cni-rs-marks.log | head -20 >&2
else
    echo "rootless run: $(grep -o '[0-9]* ignored' /tmp/cni-rs-marks.log | awk '{n+=$1} END {print n}') privileged tests reported ignored"
fi

# run_step NAME CMD...: CMD with its output in /tmp/cni-rs-NAME.log; says "NAME: passed",
# or fails the run and shows the log's end.
run_step() {
    local name=$1 log=/tmp/cni-rs-$1.log
    shift
    if "$@" >"$log" 2>&1; then
        echo "$name: passed"
    else
        status=1
        echo "$name FAILED:" >&2
        # The failure's own line first: a script's cleanup may print more than the tail.
        grep -m 5 -E 'FAILED|panicked' "$log" >&2
        tail -40 "$log" >&2
    fi
}

if [[ $EUID -eq 0 ]]; then
    # The README's demo (it cleans up after itself; it builds the release binaries).
    run_step demo scripts/demo.sh
    # Real runtimes (podman, containerd) drive those release binaries, and the live
    # switch between the Go plugins and ours; each in its own throwaway sandbox.
    for t in runtime-podman runtime-containerd live-switch; do
        run_step "$t" "scripts/$t.sh"
    done
    # The cluster install end to end: static build, podman image, the installer container
    # against a stub API server, cnitool on the conflist it wrote.
    run_step e2e-install scripts/e2e-install.sh
    # The benchmark and timing scripts in their short modes, so they cannot rot: they fail
    # on an operation failure or a leak, never on a figure.
    run_step bench-bridge scripts/bench-bridge.sh 3 20
    run_step bench-portmap scripts/bench-portmap.sh 3
    run_step timings scripts/timings.sh 3
    run_step kernel-floor scripts/kernel-floor.sh 3 20
elif [[ -n ${CI:-} ]]; then
    echo "the demo, runtime and install tests need root" >&2
    status=1
fi

# Fuzz smoke: every target for a short time (scripts/fuzz.sh SECONDS for longer runs).
run_step fuzz scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
grep '^fuzz ' /tmp/cni-rs-fuzz.log || true

# The deploy/ manifests against the Kubernetes schema (python3-kubernetes).
run_step manifests scripts/check-manifests.sh

if leak_check; then
    echo "leak check: nothing left behind"
else
    status=1
fi
exit "$status"
