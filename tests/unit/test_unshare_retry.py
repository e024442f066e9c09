"""The retry of unshare(CLONE_NEWUSER) while a joined thread leaves the kernel. The race (EINVAL
from unshare although /proc already counts one thread) cannot be produced on demand, so the
system call is replaced here; tests/integration/test_runtime.py has the real thread case."""

from __future__ import annotations

import errno

import pytest

from hydria.errors import HydriaError
from hydria.runtime import namespaces


def failing(times: int, calls: list[int]):
    def unshare(flags: int) -> None:
        calls.append(flags)
        if len(calls) <= times:
            raise OSError(errno.EINVAL, "Invalid argument")
    return unshare


def test_einval_with_one_thread_counted_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(namespaces.sc, "unshare", failing(3, calls))
    monkeypatch.setattr(namespaces, "_thread_count", lambda: 1)
    namespaces._unshare_user(123)
    assert calls == [123] * 4


def test_a_lasting_einval_is_raised_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces.sc, "unshare", failing(10**9, []))
    monkeypatch.setattr(namespaces, "_thread_count", lambda: 1)
    monkeypatch.setattr(namespaces, "LEAVING_WAIT", 0.05)
    with pytest.raises(OSError) as raised:
        namespaces._unshare_user(1)
    assert raised.value.errno == errno.EINVAL


def test_threads_that_stay_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces.sc, "unshare", failing(10**9, []))
    monkeypatch.setattr(namespaces, "_thread_count", lambda: 3)
    monkeypatch.setattr(namespaces, "THREAD_EXIT_WAIT", 0.05)
    with pytest.raises(HydriaError, match="2 other thread"):
        namespaces._unshare_user(1)
