"""Whether a lock's holder is known to be dead (hydria.liveness): only on this node, in this PID
namespace, when its PID is free, a zombie's, or was taken by a later process; never on a guess."""

from __future__ import annotations

import os
import subprocess

import pytest

from hydria.liveness import holder_line, holder_name, is_gone


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def with_fields(line: str, **changes: str) -> str:
    tag, namespace, start = line.split()
    node, _, pid = tag.rpartition(".")
    values = {"node": node, "pid": pid, "namespace": namespace, "start": start} | changes
    return f"{values['node']}.{values['pid']} {values['namespace']} {values['start']}"


def test_a_live_holder_is_not_gone() -> None:
    assert not is_gone(holder_line())


def test_a_holder_whose_process_ended_is_gone() -> None:
    assert is_gone(with_fields(holder_line(), pid=str(dead_pid())))


def test_a_holder_killed_and_not_yet_collected_is_gone() -> None:
    """A zombie (its parent has not waited yet, or it is a PID 1's that never reaps) holds nothing:
    the holder's own line, written while it lived, is judged gone once it has ended."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        alive = with_fields(holder_line(), pid=str(child.pid), start=_start_of(child.pid))
        assert not is_gone(alive)
        child.kill()
        while _state_of(child.pid) != "Z":  # ended, not collected: this test has not waited
            os.sched_yield()
        assert is_gone(alive)
    finally:
        child.wait()


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rpartition(")")[2].split()


def _start_of(pid: int) -> str:
    return _stat_fields(pid)[19]


def _state_of(pid: int) -> str:
    return _stat_fields(pid)[0]


def test_a_holder_whose_pid_another_process_took_is_gone() -> None:
    assert is_gone(with_fields(holder_line(), start="1"))


@pytest.mark.parametrize("changes", [
    {"node": "another-node"},  # another node's processes cannot be seen from here
    {"namespace": "pid:[1]"},  # nor those of another PID namespace with this host name
])
def test_a_holder_elsewhere_is_never_judged(changes: dict[str, str]) -> None:
    assert not is_gone(with_fields(holder_line(), pid=str(dead_pid()), **changes))


@pytest.mark.parametrize("line", ["", f"{os.uname().nodename}.4242", "x y", "node.0 pid:[1] 5",
                                  f"{os.uname().nodename}.abc pid:[1] 5", "a b c d"])
def test_lines_it_cannot_read_are_alive(line: str) -> None:
    assert not is_gone(line)


@pytest.mark.parametrize(("line", "name"), [
    ("node1.example.org.77 pid:[4026531836] 123", "node node1.example.org, process 77"),
    ("deadnode.4242", "node deadnode, process 4242"),  # the form of earlier versions
    ("", "another importer"), ("garbage", "another importer"),
])
def test_holder_names(line: str, name: str) -> None:
    assert holder_name(line) == name
