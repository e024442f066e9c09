"""The seccomp filter of enroot and pyxis: in a user namespace that maps a single uid and gid,
the calls that change file owners or process ids cannot do what package managers ask of them
(``apt`` under ``--root`` chowns to ``_apt``, drops to it, sets groups), so they succeed without
doing anything. ``setfsuid``/``setfsgid`` succeed likewise unless asked for -1 (a query).

The filter covers the machine's native ABI (x86_64 or aarch64); other ABIs pass through, as do
all other calls. It is installed just before the container's program runs (after
``PR_SET_NO_NEW_PRIVS``) and is visible as ``Seccomp: 2`` in ``/proc/self/status``. The Slurm
shim installs the same filter in each task (spank_hydria.c).
"""

from __future__ import annotations

import ctypes
import os
import struct

from hydria.runtime import syscalls as sc

# audit architecture, then syscall numbers: ignored (chown ... setgroups) and fs-id (setfsuid, setfsgid)
ARCHITECTURES = {
    "x86_64": (0xC000003E, (92, 93, 94, 260, 105, 106, 113, 114, 117, 119, 116), (122, 123)),
    "aarch64": (0xC00000B7, (54, 55, 146, 144, 145, 143, 147, 149, 159), (151, 152)),
}
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000  # with errno 0: the call "succeeds" without running
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (little-endian low word of args[0])
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
INSTRUCTION_SIZE = 8  # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The BPF program (code, jt, jf, k) for ``machine`` (this one by default); None where the
    filter does not know the machine's numbers."""
    known = ARCHITECTURES.get(machine or os.uname().machine)
    if known is None:
        return None
    audit_arch, ignored, fs_ids = known
    succeed, allow = (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)
    body: list[tuple[int, int, int, int]] = []
    for number in ignored:
        body += [(BPF_JEQ_K, 0, 1, number), succeed]
    for number in fs_ids:  # -1 asks for the current id: let it through
        body += [(BPF_JEQ_K, 0, 4, number), (BPF_LD_W_ABS, 0, 0, ARG0), (BPF_JEQ_K, 1, 0, 0xFFFFFFFF),
                 succeed, allow]
    return [(BPF_LD_W_ABS, 0, 0, ARCH), (BPF_JEQ_K, 1, 0, audit_arch), allow,
            (BPF_LD_W_ABS, 0, 0, NR), *body, allow]


def install() -> bool:
    """Install the filter on this process (no_new_privs must be set); False where the machine is
    not covered."""
    instructions = program()
    if instructions is None:
        return False
    load(b"".join(struct.pack("=HBBI", *instruction) for instruction in instructions))
    return True


def load(raw: bytes) -> None:
    """Install a filter given as the bytes of its ``struct sock_filter`` array (no_new_privs must
    be set)."""
    filters = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(raw) // INSTRUCTION_SIZE, ctypes.cast(filters, ctypes.c_void_p))
    sc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
