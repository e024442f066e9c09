"""A bundle's seccomp profile compiled by libseccomp (hydria.oci.seccomp_profile) and loaded the way
a container loads it (hydria.runtime.seccomp.load): the kernel then answers as the profile says."""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

from hydria.oci.seccomp_profile import compile_filter
from hydria.runtime import seccomp
from hydria.runtime import syscalls as sc

PERSONALITY_QUERY = 0xFFFFFFFF
READ_IMPLIES_EXEC = 0x0400000
# What the child needs between loading an allow-list filter and its exit.
PYTHON_NEEDS = ["brk", "mmap", "munmap", "mremap", "madvise", "rt_sigprocmask", "rt_sigaction", "futex", "write",
                "getpid", "gettid", "exit", "exit_group"]


def errno_in_child(profile: dict[str, Any], call: str, path: str) -> int:
    """Load the profile's filter in a child process, make ``call``, and return its errno (0: it ran)."""
    raw = compile_filter(profile, "config.json:")
    child = os.fork()
    if child == 0:
        code = 99
        try:
            sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
            seccomp.load(raw)
            if call == "mkdir":
                os.mkdir(path)
            else:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.personality(ctypes.c_ulong(int(path, 0))) == -1:
                    raise OSError(ctypes.get_errno(), "personality")
            code = 0
        except OSError as e:
            code = e.errno or 98
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_denied_call_fails_with_the_profiles_errno(tmp_path: Any) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EACCES}]}
    assert errno_in_child(profile, "mkdir", str(tmp_path / "made")) == errno.EACCES
    assert not (tmp_path / "made").exists()


def test_the_default_action_takes_what_no_rule_names(tmp_path: Any) -> None:
    """podman's profile is an allow list: a call it does not name fails with its default errno."""
    profile = {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.ENOSYS,
               "syscalls": [{"names": PYTHON_NEEDS, "action": "SCMP_ACT_ALLOW"}]}
    assert errno_in_child(profile, "mkdir", str(tmp_path / "made")) == errno.ENOSYS


def test_argument_comparisons_choose_the_calls_a_rule_allows(tmp_path: Any) -> None:
    """podman's profile allows personality() for a few values only: a query passes, another value
    takes the default action."""
    profile = {"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                             "args": [{"index": 0, "value": READ_IMPLIES_EXEC, "op": "SCMP_CMP_EQ"}]}]}
    assert errno_in_child(profile, "personality", hex(PERSONALITY_QUERY)) == 0
    assert errno_in_child(profile, "personality", hex(READ_IMPLIES_EXEC)) == errno.EPERM


def test_a_rule_with_the_default_action_and_unknown_calls_are_left_out(tmp_path: Any) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["mkdir", "no_such_call"], "action": "SCMP_ACT_ALLOW"}]}
    assert errno_in_child(profile, "mkdir", str(tmp_path / "made")) == 0
    assert (tmp_path / "made").is_dir()
