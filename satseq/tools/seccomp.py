"""The sandbox's seccomp filter: system calls an unprivileged Python program has no use for, refused
with ``EPERM``, built with libseccomp (through ``pyseccomp``, its ctypes bindings) and handed to
bubblewrap as BPF (``bwrap --seccomp FD``), which installs it just before the program starts.

A blocklist, after the default profiles of Docker (moby's ``profiles/seccomp/default.json``) and
Flatpak (``flatpak-run.c``'s ``setup_seccomp``), kept to calls that widen the kernel surface a
namespace leaves open: the kernel keyring, ``bpf``, ``io_uring``, ``userfaultfd``,
``perf_event_open``, ``ptrace`` and cross-process memory access, new namespaces (``unshare``,
``setns``), mounting and the new mount API, module loading, ``kexec``, ``reboot``, swap, quotas,
``syslog``, ``acct``, setting the clock, and file handles (``open_by_handle_at``, the "shocker"
container escape). The default action is to allow: ordinary Python
(threads, ``fork``/``exec``, sockets that the network namespace leaves useless, files) is
unaffected. A system call made through another ABI (i386 ``int 0x80``, x32) kills the process:
libseccomp's bad-architecture action for a filter with only the native architecture.
"""
from __future__ import annotations

import errno
import os
import threading

__all__ = ["BLOCKED", "filter_bpf"]

#: Refused with EPERM (names this libseccomp does not know on this architecture are skipped).
BLOCKED = (
    # kernel keyring
    "add_key", "keyctl", "request_key",
    # kernel extension points
    "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "perf_event_open",
    "fanotify_init", "lookup_dcookie",
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    # the machine
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "uselib", "nfsservctl", "vhangup",
    # file handles
    "open_by_handle_at", "name_to_handle_at",
)

_cache: dict[int, bytes] = {}
_lock = threading.Lock()


def filter_bpf() -> bytes:
    """The filter as a BPF program for ``bwrap --seccomp`` (built once per process). Raises ImportError
    or RuntimeError when pyseccomp or libseccomp is missing; the sandbox turns those into its
    one-line error."""
    pid = os.getpid()
    with _lock:
        if pid in _cache:
            return _cache[pid]
        import pyseccomp as seccomp  # ctypes on libseccomp.so.2: RuntimeError "Unable to find libseccomp"

        flt = seccomp.SyscallFilter(seccomp.ALLOW)
        arch = seccomp.system_arch()
        for name in BLOCKED:
            if seccomp.resolve_syscall(arch, name) >= 0:
                flt.add_rule(seccomp.ERRNO(errno.EPERM), name)
        fd = os.memfd_create("satseq-seccomp", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                flt.export_bpf(f)
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
        _cache[pid] = b"".join(chunks)
        return _cache[pid]
