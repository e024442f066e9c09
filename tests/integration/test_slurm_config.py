"""The plugin's plugstack options on the real test cluster; each test restarts the cluster with
its own configuration."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import slurm
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


@pytest.fixture
def restart(hydria_bin: str, workspace: Workspace) -> Iterator[slurm.Submitter]:
    """Call with plugstack options to (re)start the cluster; stopped after the test."""
    yield slurm.Submitter(workspace)
    slurm.stop()


def test_job_scope_containers_go_with_the_job(hydria_bin: str, restart: slurm.Submitter,
                                              images: dict[str, Path]) -> None:
    slurm.start(hydria_bin, ["container_scope=job"])
    # the job epilog runs as the user with the default settings: the data path in the user's home
    data = restart.workspace.user.home / ".local/share/hydria"
    default_data = {"HYDRIA_DATA_PATH": str(data)}
    out = restart.ok("salloc", "sh", "-c",
                     f"srun --container-image={images['busybox']} --container-name=scoped --container-writable"
                     " sh -c 'echo kept > /marker';"
                     " srun --container-name=scoped cat /marker; echo job=$SLURM_JOB_ID; ls $HYDRIA_DATA_PATH",
                     **default_data)
    lines = out.splitlines()
    assert lines[0] == "kept"  # reused across the job's steps
    name = f"hydria_{lines[1].removeprefix('job=')}_scoped"
    assert name in lines[2:]  # named after the job while it runs
    deadline = time.monotonic() + 20  # the epilog runs after salloc has let go of the allocation
    while (data / name).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (data / name).exists()
    assert "drain" not in restart.ok("sinfo", "-h", "-o", "%t")  # the epilog did not fail


def test_sbatch_support_off_unregisters_the_options(hydria_bin: str, restart: slurm.Submitter,
                                                    images: dict[str, Path]) -> None:
    slurm.start(hydria_bin, ["sbatch_support=0"])
    result = restart.run("sbatch", f"--container-image={images['busybox']}", "--wrap", "true")
    assert result.returncode != 0 and "unrecognized option '--container-image" in result.stderr
    out = restart.ok("srun", f"--container-image={images['busybox']}", "head", "-1", "/etc/os-release")
    assert out == 'PRETTY_NAME="hydria busybox test image"\n'  # srun keeps them
