"""The image's /etc/rc, run by a real shell: it enters WORKDIR, creating it only when missing
(without forking mkdir when it exists: that fork cost every start ~20 ms), and runs CMD or the
given command after ENTRYPOINT."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hydria.image.ref.runtime_files import runtime_files


def run_rc(tmp_path: Path, config: dict[str, object], *args: str) -> tuple[str, bool]:
    """Run the rc with a ``mkdir`` that notes each call; (stdout, whether mkdir ran)."""
    rc = tmp_path / "rc"
    rc.write_text(runtime_files(config, "docker://example/image").rc)
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    marker = tmp_path / "mkdir-ran"
    (tools / "mkdir").write_text(f'#!/bin/sh\ntouch {marker}\nexec /bin/mkdir "$@"\n')
    (tools / "mkdir").chmod(0o755)
    result = subprocess.run(["/bin/sh", str(rc), *args], capture_output=True, text=True, check=True,
                            env={"PATH": f"{tools}:{os.environ['PATH']}"})
    return result.stdout, marker.exists()


def test_existing_workdir_is_entered_without_mkdir(tmp_path: Path) -> None:
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    out, mkdir_ran = run_rc(tmp_path, {"WorkingDir": str(workdir), "Cmd": ["pwd"]})
    assert out == f"{workdir}\n" and not mkdir_ran


def test_missing_workdir_is_created(tmp_path: Path) -> None:
    workdir = tmp_path / "made" / "here"
    out, mkdir_ran = run_rc(tmp_path, {"WorkingDir": str(workdir), "Entrypoint": ["echo", "entry"]}, "arg")
    assert out == "entry arg\n" and mkdir_ran and workdir.is_dir()
