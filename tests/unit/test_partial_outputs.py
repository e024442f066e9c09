"""What killed writers left beside an output is removed by the next write of the same name on the
same node, and only that (hydria.partial)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hydria.partial import partial_path


def gone_pid() -> int:
    """The PID of a process of this node that has ended and been collected."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_the_partial_outputs_of_gone_processes_go_and_the_others_stay(tmp_path: Path) -> None:
    target = tmp_path / "image.sqsh"
    node, gone = os.uname().nodename, gone_pid()
    left_file = tmp_path / f".image.sqsh.partial.{node}.{gone}"
    left_folder = tmp_path / f".image.sqsh.partial.{node}.{gone_pid()}"
    left_file.write_bytes(b"half an image")
    (left_folder / "deep").mkdir(parents=True)
    kept = [tmp_path / f".image.sqsh.partial.{node}.{os.getppid()}",  # a writer that still runs
            tmp_path / f".image.sqsh.partial.othernode.{gone}",  # another node's: its PIDs are not ours
            tmp_path / f".other.sqsh.partial.{node}.{gone}",  # another output's
            tmp_path / f".image.sqsh.partial.{node}.not-a-pid",
            tmp_path / f".image.sqsh.partial.{node}.\u00b2"]  # a digit to str.isdigit, not to int()
    for path in kept:
        path.write_bytes(b"")
    mine = partial_path(target)
    assert mine == tmp_path / f".image.sqsh.partial.{node}.{os.getpid()}"
    assert sorted(tmp_path.iterdir()) == sorted(kept)
