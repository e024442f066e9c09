"""The plugin's plugstack options on the real test cluster; each test restarts the cluster with
its own configuration."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import slurm
from testbed.publish import PublishedImage
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
    out = restart.ok("salloc", "sh", "-c",
                     f"srun --container-image={images['busybox']} --container-name=scoped --container-writable"
                     " sh -c 'echo kept > /marker';"
                     f" srun --container-name=scoped cat /marker; echo job=$SLURM_JOB_ID; ls {data}",
                     HYDRIA_TESTBED_DATA="")
    lines = out.splitlines()
    assert lines[0] == "kept"  # reused across the job's steps
    name = f"pyxis_{lines[1].removeprefix('job=')}_scoped"
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


IMPORTER = """#!/bin/sh
# pyxis's simple_importer, with hydria's import: the squashfs lives in the plugin's runtime path
set -e
image="$PYXIS_RUNTIME_PATH/$SLURM_JOB_UID/$SLURM_JOB_ID.$SLURM_STEP_ID.squashfs"
echo "$1 ${2-} uid=$SLURM_JOB_UID" >> "{log}"
case "$1" in
get)
    case "$2" in *missing*) echo "no such image: $2" >&2; exit 3 ;; esac
    "{hydria}" import -q --output "$image" "$2" >&2
    echo "$image" ;;
release)
    rm -f "$image" ;;
esac
"""


def test_an_importer_plugin_makes_the_images(hydria_bin: str, restart: slurm.Submitter,
                                            busybox: PublishedImage) -> None:
    workspace = restart.workspace
    log = workspace.out / "importer.log"
    importer = slurm.ROOT / "importer.sh"
    slurm.ROOT.mkdir(parents=True, exist_ok=True)
    importer.write_text(IMPORTER.replace("{log}", str(log)).replace("{hydria}", hydria_bin))
    importer.chmod(0o755)
    runtime = slurm.ROOT / "runtime"
    slurm.start(hydria_bin, [f"importer={importer}", f"runtime_path={runtime}"])
    uri = busybox.docker_uri
    out = restart.ok("srun", f"--container-image={uri}", "head", "-1", "/etc/os-release")
    assert out == 'PRETTY_NAME="hydria busybox test image"\n'
    restart.ok("srun", f"--container-image={uri}", "--container-name=from-plugin", "true")
    uid = workspace.user.uid
    assert log.read_text().splitlines() == [f"get {uri} uid={uid}", f"release  uid={uid}",  # unnamed: at the end
                                            f"get {uri} uid={uid}", f"release  uid={uid}", f"release  uid={uid}"]
    user_dir = runtime / str(uid)
    assert user_dir.stat().st_uid == uid and user_dir.stat().st_mode & 0o777 == 0o700
    assert list(user_dir.iterdir()) == []  # every release removed its file
    failed = restart.run("srun", f"--container-image={uri.replace('busybox', 'missing')}", "true")
    assert failed.returncode != 0
    assert "no such image" in failed.stderr and "importer get failed with exit code 3" in failed.stderr


def test_a_site_default_of_cdi_devices(hydria_bin: str, restart: slurm.Submitter, images: dict[str, Path]) -> None:
    """Plugstack container_device=: every container step gets those CDI devices, unless it names its own."""
    specs = restart.workspace.root / "cdi"
    specs.mkdir()
    devices = [{"name": name, "containerEdits": {"env": [f"X_DEVICE={name}"]}} for name in ("a", "b")]
    (specs / "x.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/x", "devices": devices}))
    slurm.start(hydria_bin, ["container_device=example.com/x=a"])
    image = f"--container-image={images['busybox']}"
    assert restart.ok("srun", image, "sh", "-c", "echo $X_DEVICE", HYDRIA_TESTBED_CDI=str(specs)) == "a\n"
    assert restart.ok("srun", image, "--container-device=example.com/x=b", "sh", "-c", "echo $X_DEVICE",
                      HYDRIA_TESTBED_CDI=str(specs)) == "b\n"
    assert restart.ok("srun", "sh", "-c", "echo ${X_DEVICE-none}") == "none\n"  # no container, no devices
