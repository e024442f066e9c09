"""The seccomp program's shape (runtime/seccomp.py); tests/integration/test_seccomp.py runs it."""

from __future__ import annotations

from hydria.runtime import seccomp


def test_native_abi_only_and_default_allow() -> None:
    program = seccomp.program("x86_64")
    assert program is not None
    assert program[:3] == [(seccomp.BPF_LD_W_ABS, 0, 0, seccomp.ARCH), (seccomp.BPF_JEQ_K, 1, 0, 0xC000003E),
                           (seccomp.BPF_RET_K, 0, 0, seccomp.SECCOMP_RET_ALLOW)]
    assert program[-1] == (seccomp.BPF_RET_K, 0, 0, seccomp.SECCOMP_RET_ALLOW)
    assert seccomp.program("riscv64") is None  # numbers not known: no filter rather than a wrong one


def test_every_listed_call_returns_success() -> None:
    for machine, (_, ignored, fs_ids) in seccomp.ARCHITECTURES.items():
        program = seccomp.program(machine)
        assert program is not None
        compared = [k for code, _, _, k in program if code == seccomp.BPF_JEQ_K]
        assert set(ignored) | set(fs_ids) <= set(compared), machine
        for index, (code, jt, jf, k) in enumerate(program):
            if code == seccomp.BPF_JEQ_K:
                assert index + 1 + max(jt, jf) < len(program)  # every jump lands inside
