"""Slurm's ``scrun`` with hydria as the runtime: ``podman run`` as an ordinary user submits the
container to Slurm, which runs podman's own config.json with hydria on the node (testbed/scrun.py).

Needs a Slurm with scrun (23.02 and newer, built with Lua) under ``HYDRIA_TEST_SLURM_PREFIX``, and
podman; Debian's Slurm 22.05, which CI runs, has no scrun, so there these tests say why they do
not run. docs/slurm.md gives the command and the last results.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import scrun
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(scrun.missing() is not None, reason=scrun.missing() or "")]

# podman's default capabilities (CHOWN DAC_OVERRIDE FOWNER FSETID KILL NET_BIND_SERVICE SETFCAP
# SETGID SETPCAP SETUID SYS_CHROOT), as podman 4 writes them into the bundle.
PODMAN_CAPABILITIES = "00000000800405fb"
REPORT = ('echo "job=$SLURM_JOB_ID user=$(id -u)"; grep -E "^(CapEff|CapBnd|Seccomp):" /proc/self/status; '
          "cat /proc/sys/kernel/hostname > /dev/null && echo proc readable")


@pytest.fixture
def podman(cluster: None, workspace: Workspace, hydria_bin: str, images: dict[str, Path]) -> Iterator[dict[str, str]]:
    """podman for the workspace's user, with scrun as its runtime: the environment to run it with."""
    try:
        yield scrun.prepare(workspace, hydria_bin, images["busybox"])
    finally:
        scrun.cleanup(workspace)


def run_podman(workspace: Workspace, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_as(workspace.user, ["podman", "run", "--rm", *args], env=env, cwd=workspace.root, timeout=180)


def test_podman_run_through_scrun_runs_in_a_job_with_podmans_confinement(workspace: Workspace,
                                                                         podman: dict[str, str]) -> None:
    """The container runs as a Slurm job's step, as root mapped to the user, with the capabilities
    and seccomp profile podman asked for."""
    result = run_podman(workspace, podman, scrun.IMAGE, "sh", "-c", REPORT)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr
    assert lines[0].startswith("job=") and lines[0].split()[0][4:].isdigit(), result.stdout
    assert lines[0].endswith(" user=0")
    assert lines[1:] == [f"CapEff:\t{PODMAN_CAPABILITIES}", f"CapBnd:\t{PODMAN_CAPABILITIES}", "Seccomp:\t2",
                         "proc readable"], result.stderr


def test_a_podman_option_hydria_does_not_do_fails_naming_the_field(workspace: Workspace,
                                                                  podman: dict[str, str]) -> None:
    """``--user 4242`` asks for an account that is neither the caller nor root: refused by name,
    the message on podman's error stream. (scrun itself answers podman with status 0 for a step
    that failed, whatever the runtime: docs/slurm.md.)"""
    result = run_podman(workspace, podman, "--user", "4242", scrun.IMAGE, "true")
    assert "process.user.uid 4242: a container runs as its caller" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
