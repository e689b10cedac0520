#!/usr/bin/env python3
"""Peak RSS of one process itself, not of its children: peak-rss.py OUT CMD [ARG...]

Runs CMD (stdio inherited) under ptrace with PTRACE_O_TRACEEXIT: at its exit stop, before
the kernel releases its memory, VmHWM of /proc/PID/status is its own peak resident set.
Writes that (kB) to OUT and exits with CMD's status. Children CMD starts (an IPAM plugin,
iptables) are not traced and do not count, unlike wait4's ru_maxrss (GNU time %M), which
is the largest of the process and its waited-for children.
"""
import ctypes
import os
import signal
import sys

PTRACE_TRACEME, PTRACE_CONT, PTRACE_SETOPTIONS = 0, 7, 0x4200
PTRACE_O_TRACEEXIT, PTRACE_EVENT_EXIT = 0x40, 6

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(req, pid, data=0):
    if libc.ptrace(req, pid, None, ctypes.c_void_p(data)) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def main():
    out, argv = sys.argv[1], sys.argv[2:]
    pid = os.fork()
    if pid == 0:
        ptrace(PTRACE_TRACEME, 0)
        os.execvp(argv[0], argv)
    _, status = os.waitpid(pid, 0)  # the stop at exec
    ptrace(PTRACE_SETOPTIONS, pid, PTRACE_O_TRACEEXIT)
    ptrace(PTRACE_CONT, pid)
    peak = None
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
        sig = os.WSTOPSIG(status)
        if sig == signal.SIGTRAP and status >> 16 == PTRACE_EVENT_EXIT:
            peak = vm_hwm(pid)
            sig = 0
        ptrace(PTRACE_CONT, pid, sig)  # other stops: deliver the signal
    with open(out, "w") as f:
        f.write(f"{peak}\n")
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


main()
