"""hydria.locks: the one flock helper every lock uses, and the link lock that holds on NFS."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hydria import locks
from hydria.liveness import holder_line


def test_a_lock_is_held_until_its_descriptor_closes(tmp_path: Path) -> None:
    lock = tmp_path / "a.lock"
    fd = locks.take(lock)
    assert fd is not None and (lock.stat().st_mode & 0o777) == 0o600
    assert locks.take(lock, timeout=0) is None
    os.close(fd)
    again = locks.take(lock, timeout=0)
    assert again is not None
    os.close(again)


def test_shared_holders_keep_out_an_exclusive_one_only(tmp_path: Path) -> None:
    lock = tmp_path / "a.lock"
    with locks.held(lock, shared=True) as first, locks.held(lock, shared=True, timeout=0) as second:
        assert first and second
        with locks.held(lock, timeout=0) as alone:
            assert not alone


def test_a_bounded_wait_ends_and_says_so(tmp_path: Path) -> None:
    lock = tmp_path / "a.lock"
    with locks.held(lock):
        started = time.monotonic()
        assert locks.take(lock, timeout=0.2) is None
        assert 0.2 <= time.monotonic() - started < 5


def test_a_wait_ends_when_the_holder_lets_go(tmp_path: Path) -> None:
    lock = tmp_path / "a.lock"
    program = (f"import fcntl, os, time\nfd = os.open({str(lock)!r}, os.O_RDONLY | os.O_CREAT)\n"
               "fcntl.flock(fd, fcntl.LOCK_EX); print(flush=True); time.sleep(0.3)")
    holder = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "\n"  # it holds the lock now
    fd = locks.take(lock, timeout=30)
    assert fd is not None and holder.wait(30) == 0
    os.close(fd)


@pytest.mark.parametrize(("plant", "code"), [
    (lambda path: path.symlink_to(path.parent / "elsewhere"), errno.ELOOP),
    (lambda path: os.mkfifo(path), errno.EINVAL),
    (lambda path: path.mkdir(), errno.EISDIR),
])
def test_what_is_planted_under_a_locks_name_is_refused_at_once(tmp_path: Path, plant, code: int) -> None:
    lock = tmp_path / "a.lock"
    plant(lock)
    with pytest.raises(OSError) as raised:
        locks.take(lock, timeout=0)  # a FIFO opened for reading would block here
    assert raised.value.errno == code
    assert not (tmp_path / "elsewhere").exists()


def test_a_missing_lock_is_made_only_when_asked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        locks.take(tmp_path / "a.lock", create=False)
    assert not (tmp_path / "a.lock").exists()


def test_a_link_lock_names_its_holder_to_the_others_and_goes_with_it(tmp_path: Path) -> None:
    lock = locks.LinkLock(tmp_path / "key.lock")
    with lock.held() as mine:
        assert mine is None and (tmp_path / "key.lock").read_text() == holder_line() + "\n"
        with locks.LinkLock(tmp_path / "key.lock").held() as other:
            assert other is not None and str(os.getpid()) in other
    assert list(tmp_path.iterdir()) == []


def test_a_link_lock_is_kept_fresh_while_held(tmp_path: Path) -> None:
    path = tmp_path / "key.lock"
    with locks.LinkLock(path, heartbeat=0.05).held() as mine:
        assert mine is None
        os.utime(path, (0, 0))
        deadline = time.monotonic() + 10
        while path.stat().st_mtime == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.stat().st_mtime > 0


def _dead_holders_line() -> str:
    child = subprocess.Popen([sys.executable, "-c", "from hydria.liveness import holder_line; print(holder_line())"],
                             stdout=subprocess.PIPE, text=True)
    line, _ = child.communicate(timeout=60)
    return line.strip()


@pytest.mark.parametrize("how", ["killed", "stale"])
def test_a_dead_holders_link_lock_is_taken_over_once(tmp_path: Path, how: str) -> None:
    path = tmp_path / "key.lock"
    path.write_text((_dead_holders_line() if how == "killed" else holder_line().replace(" ", "x ", 1)) + "\n")
    if how == "stale":
        os.utime(path, (time.time() - 200, time.time() - 200))
    taken: list[tuple[str, str]] = []
    with locks.LinkLock(path, taken_over=lambda line, why: taken.append((line, why)), stale_after=180).held() as mine:
        assert mine is None and path.read_text() == holder_line() + "\n"
    assert len(taken) == 1
    assert ("is gone (killed)" if how == "killed" else "has not touched its lock for 200 s") in taken[0][1]
    assert list(tmp_path.iterdir()) == []


def test_a_fresh_lock_of_a_live_holder_is_not_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "key.lock"
    path.write_text(holder_line().replace(" ", "x ", 1) + "\n")  # a holder it cannot judge: alive for it
    with locks.LinkLock(path, taken_over=lambda line, why: pytest.fail("taken over")).held() as mine:
        assert mine is not None
    assert path.exists()
