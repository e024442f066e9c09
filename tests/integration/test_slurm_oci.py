"""Slurm's own containers (``srun --container=BUNDLE``) run by hydria through the oci.conf that
``hydria oci conf`` prints, on the real test cluster (Debian's Slurm 22.05: one task per node in
a container step, as that release allows)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import slurm
from testbed.users import live_processes, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

REPORT = ('echo "pid=$$ host=$(hostname) id=$(id -u) cwd=$(pwd) foo=$FOO from_bundle=$FROM_BUNDLE"; '
          'cat /data/file; touch /written 2>&1')


@pytest.fixture
def oci_slurm(cluster: None, hydria_bin: str, workspace: Workspace) -> Iterator[slurm.Submitter]:
    """The test cluster with hydria's oci.conf beside its slurm.conf."""
    conf = slurm.ROOT / "oci.conf"
    conf.write_text(subprocess.run([hydria_bin, "oci", "conf"], capture_output=True, text=True,
                                   check=True).stdout)
    yield slurm.Submitter(workspace)
    conf.unlink()


@pytest.fixture
def bundle(workspace: Workspace, images: dict[str, Path]) -> Path:
    """An OCI bundle of the busybox image, unpacked by its user (as ``umoci unpack --rootless``
    leaves one), with a data folder to bind."""
    folder = workspace.out / "bundle"
    folder.mkdir()
    os.chown(folder, workspace.user.uid, workspace.user.gid)
    unpacked = run_as(workspace.user, ["unsquashfs", "-q", "-d", str(folder / "rootfs"), str(images["busybox"])])
    assert unpacked.returncode == 0, unpacked.stderr
    data = workspace.out / "data"
    data.mkdir()
    (data / "file").write_text("payload\n")
    write_config(folder, config(data))
    return folder


def config(data: Path) -> dict[str, Any]:
    return {"ociVersion": "1.0.2",
            "process": {"args": ["sh"], "env": ["PATH=/bin", "FROM_BUNDLE=yes"], "cwd": "/tmp",
                        "user": {"uid": 0, "gid": 0}, "terminal": False, "noNewPrivileges": True},
            "root": {"path": "rootfs", "readonly": True}, "hostname": "ocibox",
            "linux": {"namespaces": [{"type": "pid"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"}]},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/data", "type": "bind", "source": str(data), "options": ["rbind", "ro"]}]}


def write_config(bundle: Path, content: dict[str, Any]) -> None:
    (bundle / "config.json").write_text(json.dumps(content))
    bundle.chmod(0o755)


def test_srun_container_runs_the_bundles_config(oci_slurm: slurm.Submitter, bundle: Path) -> None:
    """srun's command, in the bundle's namespaces, host name, user, working directory, mounts and
    read-only root, with the step's environment over the bundle's (also a name no shell may set,
    as an exported bash function has); the bundle is not written."""
    before = sorted(path.name for path in (bundle / "rootfs").iterdir())
    result = oci_slurm.run("srun", f"--container={bundle}", "sh", "-c", REPORT,
                           **{"FOO": "from-srun", "BASH_FUNC_ml%%": "() {  echo module\n}"})
    lines = result.stdout.splitlines()
    assert lines[0] == "pid=1 host=ocibox id=0 cwd=/tmp foo=from-srun from_bundle=yes", result.stderr
    assert lines[1] == "payload" and "Read-only file system" in lines[2]
    assert result.returncode == 1  # touch's, the container's status
    assert sorted(path.name for path in (bundle / "rootfs").iterdir()) == before  # no mount point made in it


CONFINED = ("grep -E '^Cap(Bnd|Eff)' /proc/self/status; echo secret=$(cat /etc/secret); ls /opt/hidden | wc -l; "
            "touch /srv/file 2>&1; touch /tmp/file && echo tmp written; mkdir /tmp/folder 2>&1; "
            "ls /proc/sys/kernel | wc -l")


def test_a_bundles_capabilities_masks_and_seccomp_profile_are_applied(oci_slurm: slurm.Submitter, bundle: Path,
                                                                       workspace: Workspace) -> None:
    """What podman writes into every bundle to confine its process, done as crun does it: the
    capability sets, masked paths (a file reads empty, a folder shows nothing), read-only paths,
    and the seccomp profile (here: mkdir denied with EACCES)."""
    rootfs = bundle / "rootfs"
    for command in (["sh", "-c", f"echo hidden > {rootfs}/etc/secret"], ["mkdir", "-p", f"{rootfs}/opt/hidden/a",
                                                                         f"{rootfs}/srv"]):
        assert run_as(workspace.user, command).returncode == 0
    content = config(bundle.parent / "data")
    content["root"]["readonly"] = False
    kept = ["CAP_CHOWN", "CAP_KILL", "CAP_SETUID"]  # 0, 5, 7
    content["process"]["capabilities"] = {"bounding": kept, "effective": kept, "permitted": kept}
    content["linux"].update(
        maskedPaths=["/etc/secret", "/opt/hidden", "/proc/sys/kernel", "/not/there"], readonlyPaths=["/srv"],
        seccomp={"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
                 "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]})
    write_config(bundle, content)
    result = oci_slurm.run("srun", f"--container={bundle}", "sh", "-c", CONFINED)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "CapEff:\t00000000000000a1", "CapBnd:\t00000000000000a1", "secret=", "0",
        "touch: /srv/file: Read-only file system", "tmp written", ("mkdir: can't create directory '/tmp/folder': "
        "Permission denied"), "0"], result.stderr


@pytest.mark.parametrize(("change", "message"), [
    (None, "root.path {bundle}/rootfs is not a folder"),  # (Slurm 22.05 names BUNDLE/rootfs, whatever it says)
    (lambda c: c["linux"].update(resources={"memory": {"limit": 1 << 30}}),
     "linux.resources.memory: a Slurm task's limits are its job's"),
    (lambda c: c["linux"]["namespaces"].append({"type": "network", "path": "/proc/1/ns/net"}),
     "linux.namespaces[4].path: hydria makes a container's namespaces; it does not join others'"),
    (lambda c: c["mounts"].append({"destination": "/mnt", "type": "nfs", "source": "server:/x"}),
     "mounts[2].type 'nfs' at /mnt: hydria mounts binds and tmpfs"),
    (lambda c: c["process"].update(user={"uid": 4242, "gid": 0}), "process.user.uid 4242: a container runs as"),
])
def test_a_bundle_hydria_cannot_run_as_asked_fails_naming_the_field(
        oci_slurm: slurm.Submitter, bundle: Path, change: Any, message: str) -> None:
    content = config(bundle.parent / "data")
    if change is None:
        (bundle / "rootfs").rename(bundle / "gone")
    else:
        change(content)
    write_config(bundle, content)
    result = oci_slurm.run("srun", f"--container={bundle}", "true")
    assert result.returncode != 0
    assert message.format(bundle=bundle) in result.stderr, result.stderr
    assert "hint: " in result.stderr and "Traceback" not in result.stderr


def test_state_kill_and_delete_see_and_end_a_steps_containers(oci_slurm: slurm.Submitter, bundle: Path,
                                                                hydria_bin: str, workspace: Workspace) -> None:
    """What slurmstepd runs as root when a step ends: the state of the step's containers on the
    node (running while one runs, with its PID), SIGTERM to them (a PID namespace's first process
    would ignore it: none here), then stopped."""
    content = config(bundle.parent / "data")
    content["linux"]["namespaces"] = [{"type": "mount"}, {"type": "user"}]
    content.pop("hostname")
    write_config(bundle, content)
    submitted = oci_slurm.ok("sbatch", "--wrap", f"srun --container={bundle} sleep 300")
    job = submitted.split()[-1]
    step = ["--user", workspace.user.name, "--job", job, "--step", "0"]
    try:
        deadline = time.monotonic() + 60
        while (state := _state(hydria_bin, step))["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert state["status"] == "running" and state["id"] == f"{job}.0", state
        program, *args = Path(f"/proc/{state['pid']}/cmdline").read_bytes().split(b"\0")
        assert os.path.basename(program) == b"sleep" and args == [b"300", b""]  # 23.11 gives the path: /bin/sleep
        assert _state(hydria_bin, [*step[:3], str(int(job) + 1000), *step[4:]])["status"] == "stopped"  # another job
        subprocess.run([hydria_bin, "oci", "kill", *step], check=True)
        deadline = time.monotonic() + 20
        while (state := _state(hydria_bin, step))["status"] != "stopped" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert state == {"ociVersion": "1.0.2", "id": f"{job}.0", "status": "stopped", "pid": 0, "bundle": ""}
        subprocess.run([hydria_bin, "oci", "delete", *step], check=True)  # nothing left: nothing to do
    finally:
        oci_slurm.run("scancel", job)


def test_scancel_ends_the_container_and_its_program_at_once(oci_slurm: slurm.Submitter, bundle: Path,
                                                             workspace: Workspace) -> None:
    """The bundle's program is PID 1 of its namespace, which ignores SIGTERM. Slurm runs RunTimeRun
    through /bin/sh -c: on Slurm 26.05 the shell died on scancel's SIGTERM and left hydria and the
    program orphaned, out of the reach of proctrack's SIGKILL, for a minute, until oci.conf's exec
    made hydria the task itself. Debian's 22.05, which this cluster runs, ends them either way."""
    submitted = oci_slurm.ok("sbatch", "--wrap", f"srun --container={bundle} sleep 321")
    job = submitted.split()[-1]

    try:
        _wait_until_running(workspace, "sleep 321")
    finally:
        oci_slurm.run("scancel", job)
    cancelled = time.monotonic()
    _until(lambda: not _left(workspace, "sleep 321"), 60)
    assert _left(workspace, "sleep 321") == [] and time.monotonic() - cancelled < 45, \
        _left(workspace, "sleep 321")  # Slurm's KillWait is 30 s


def test_the_container_ends_with_the_shell_that_ran_it(bundle: Path, workspace: Workspace) -> None:
    """RunTimeRun without ``exec``, on a shell that forks (Debian's dash, for a command list): the
    shell killed (scancel's SIGTERM, or any way) ends hydria oci run and the container's PID 1,
    which no signal of the step's reaches once they are orphaned. Here without Slurm: the
    shell is killed by hand, with SIGKILL, so that it can forward nothing."""
    content = config(bundle.parent / "data")
    content["process"]["args"] = ["sleep", "322"]
    write_config(bundle, content)
    shell = subprocess.Popen(["sh", "-c", '"$0" oci run --bundle "$1"; echo ended', workspace.hydria, str(bundle)],
                             user=workspace.user.uid, group=workspace.user.gid, extra_groups=[],
                             env=workspace.user.environment(workspace.env()), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)

    try:
        _wait_until_running(workspace, "sleep 322")
    finally:
        shell.kill()
        shell.wait()
    _until(lambda: not _left(workspace, "sleep 322"), 30)
    assert _left(workspace, "sleep 322") == [], _left(workspace, "sleep 322")


def _left(workspace: Workspace, program: str) -> list[str]:
    """The user's processes that are the container's program or hydria oci run."""
    return [line for line in live_processes(workspace.user, wait=0) if program in line or "oci run" in line]


def _until(done: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_until_running(workspace: Workspace, program: str) -> None:
    _until(lambda: any(program in line for line in _left(workspace, program)), 60)
    assert any(program in line for line in _left(workspace, program)), "the container's program never started"


def _state(hydria_bin: str, step: list[str]) -> dict[str, Any]:
    result = subprocess.run([hydria_bin, "oci", "state", *step], capture_output=True, text=True, check=True)
    return dict(json.loads(result.stdout))
