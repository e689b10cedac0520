#!/usr/bin/env python3
"""Sequential ADD, DEL-with-prevResult pairs of one bridge, each timed as a runtime sees it:
plugin-runs.py BIN_DIR CONF TAG NETNS RUNS

Runs RUNS+1 pairs (the first a warm-up, not printed) of BIN_DIR/bridge with CNI_PATH=BIN_DIR,
container IDs TAG-0..TAG-RUNS in /run/netns/NETNS, and prints "add_us del_us" per pair. Each
figure is one spawn (vfork + exec, as Go's os/exec), stdin written, stdout read to EOF and
the exit waited for: what a runtime waits, without a shell's fork and here-string around
it (bash's `$(plugin <<<"$conf")` adds ~2 ms to every run, ours and the reference alike,
which understates the ratio between them). Exits non-zero when a run fails.
"""
import os
import subprocess
import sys
import time


def run(bridge, env, conf):
    t0 = time.perf_counter_ns()
    out = subprocess.run([bridge], input=conf, env=env, stdout=subprocess.PIPE, check=False)
    t1 = time.perf_counter_ns()
    if out.returncode != 0:
        sys.exit(f"{env['CNI_COMMAND']} {env['CNI_CONTAINERID']} failed: {out.stdout.decode()}")
    return (t1 - t0) // 1000, out.stdout


def main():
    bin_dir, conf, tag, netns, runs = sys.argv[1:6]
    bridge = os.path.join(bin_dir, "bridge")
    base = dict(os.environ, CNI_PATH=bin_dir, CNI_NETNS=f"/run/netns/{netns}", CNI_IFNAME="eth0")
    for i in range(int(runs) + 1):
        env = dict(base, CNI_CONTAINERID=f"{tag}-{i}")
        add_us, result = run(bridge, dict(env, CNI_COMMAND="ADD"), conf.encode())
        with_prev = conf.rstrip().removesuffix("}") + ',"prevResult":' + result.decode() + "}"
        del_us, _ = run(bridge, dict(env, CNI_COMMAND="DEL"), with_prev.encode())
        if i > 0:
            print(add_us, del_us, flush=True)


if __name__ == "__main__":
    main()
