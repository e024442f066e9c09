"""hydria's Open MPI launch agent (hydria/launch.py): what it hands to ssh, run for real with a
stand-in ``ssh`` that runs the remote command here through a shell, as sshd would."""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hydria.hooks import launch


def test_launchers_are_recognised() -> None:
    assert launch.is_launcher(["/usr/bin/mpirun", "-np", "2"]) and launch.is_launcher(["mpiexec"])
    assert launch.is_launcher(["/.hydria-launch", "--daemon", "orted"])
    assert not launch.is_launcher(["python3", "mpirun"]) and not launch.is_launcher([])


def test_remote_start_repeats_settings_options_and_an_absolute_image(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    image = tmp_path / "img.sqsh"
    image.write_bytes(b"hsqs")
    monkeypatch.chdir(tmp_path)
    command = launch.remote_start(["--root", "--env", "A=b c"], "img.sqsh",
                                  {"HYDRIA_DATA_PATH": "/d", "ENROOT_REMAP_ROOT": "y", "HOME": "/h", "HYDRIA_X": ""})
    hydria = str(Path(sys.executable).parent / "hydria")
    assert shlex.split(command) == ["env", "ENROOT_REMAP_ROOT=y", "HYDRIA_DATA_PATH=/d", hydria, "start", "--root",
                                    "--env", "A=b c", str(image)]
    assert shlex.split(launch.remote_start([], "named", {}))[-2:] == ["start", "named"]


def test_the_agent_runs_the_daemon_command_through_the_remote_start(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "ssh").write_text('#!/bin/sh\n'
                                  'while [ "${1#-}" != "$1" ]; do\n'
                                  '  case "$1" in -x) shift ;; -l) login=$2; shift 2 ;; *) shift 2 ;; esac\n'
                                  'done\n'
                                  'echo "host=$1 login=$login" > "$OUT"; shift; exec sh -c "$*"\n')
    (fake_bin / "ssh").chmod(0o755)
    area = tmp_path / "area"
    area.mkdir()
    remote = shlex.join(["env", "HYDRIA_MARK=set", sys.executable, "-c",
                         "import os, sys; print(os.environ['HYDRIA_MARK'], sys.argv[1:])"])  # the remote start
    environment, mounts = launch.prepare(remote, str(area), "alice", str(tmp_path / "nohome"), "/root")
    assert environment == {"OMPI_MCA_plm_rsh_agent": "/.hydria-launch", "PRTE_MCA_plm_ssh_agent": "/.hydria-launch"}
    assert [(m.source, m.target) for m in mounts] == [(f"{area}/launch-agent", "/.hydria-launch")]  # no ~/.ssh here
    # Open MPI's daemon command: separate words, some holding quotes and ';' meant for the remote shell
    daemon = ["orted", "-mca", "orte_hnp_uri", '"1234.0;tcp://10.0.0.1:5000"', "-mca", "x", "'a b'"]
    result = subprocess.run([f"{area}/launch-agent", "node7", *daemon], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")},
                            check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_text() == "host=node7 login=alice\n"
    assert result.stdout.startswith("set ")
    words = ast.literal_eval(result.stdout[4:])  # the list the stand-in printed
    assert words[:2] == ["/.hydria-launch", "--daemon"] and words[2] == " ".join(daemon)  # as ssh would send it
    assert shlex.split(words[2]) == ["orted", "-mca", "orte_hnp_uri", "1234.0;tcp://10.0.0.1:5000", "-mca", "x", "a b"]


def test_the_users_ssh_folder_is_mounted_for_the_client(tmp_path: Path) -> None:
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "area").mkdir()
    _, mounts = launch.prepare("true", str(tmp_path / "area"), "u", str(tmp_path / "home"), "/home/u")
    assert (mounts[1].source, mounts[1].target) == (str(tmp_path / "home" / ".ssh"), "/home/u/.ssh")
    assert "ro" in mounts[1].options


def test_the_agent_runs_the_daemon_on_the_remote_side(tmp_path: Path) -> None:
    (tmp_path / "area").mkdir()
    launch.prepare("true", str(tmp_path / "area"), "u", str(tmp_path), "/home/u")
    result = subprocess.run([f"{tmp_path}/area/launch-agent", "--daemon", "echo \"$0\" 'a  b'"],
                            capture_output=True, text=True, check=True)
    assert result.stdout == "sh a  b\n"
