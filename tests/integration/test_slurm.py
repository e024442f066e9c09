"""The Slurm plugin on a real single-node Slurm cluster (testbed/slurm.py), driven with real
``srun`` as the unprivileged test user, with pyxis's options."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import slurm
from testbed.oci import Image, make_layer, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.tarbuild import LayerTar
from testbed.users import SLURM_PREFIX, User, live_processes, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


@pytest.fixture
def srun(cluster: None, workspace: Workspace) -> Iterator[Srun]:
    yield Srun(workspace)


class Srun:
    """``srun`` as the test user."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.submitter = slurm.Submitter(workspace)

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.submitter.run("srun", *args, **env)

    def ok(self, *args: str, **env: str) -> str:
        return self.submitter.ok("srun", *args, **env)


def test_tasks_run_in_the_image(srun: Srun, images: dict[str, Path]) -> None:
    out = srun.ok(f"--container-image={images['debian']}", "grep", "PRETTY", "/etc/os-release")
    assert out.startswith('PRETTY_NAME="Debian GNU/Linux 12')
    assert srun.ok(f"--container-image={images['busybox']}", "id", "-u") == f"{srun.workspace.user.uid}\n"


@pytest.fixture
def local_scratch(workspace: Workspace) -> Iterator[Path]:
    """A tmpfs for the steps' scratch (HYDRIA_TEMP_PATH) on another file system than the cache,
    as a node's local /tmp and a cache in an NFS home are."""
    mount = workspace.root / "local-tmp"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,uid={workspace.user.uid}", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.mark.parametrize("layered", ["y", "n"])
def test_a_kept_image_on_another_file_system_is_used_where_it_is(srun: Srun, busybox: PublishedImage,
                                                                  local_scratch: Path, layered: str) -> None:
    """One image file each (HYDRIA_LAYERED_IMAGES=n): the first step imports into its scratch (and
    the image is kept in the cache); later steps start from the kept image instead of copying it
    into their scratch. Layered images (the default) are made in the cache and used there: no step
    writes its scratch."""
    image = busybox.docker_uri.removeprefix("docker://")
    look = ("sh", "-c", "find /scratch -name '*.sqsh'; cat /etc/os-release")
    options = (f"--container-image={image}", f"--container-mounts={local_scratch}:/scratch")
    first = srun.ok(*options, *look, HYDRIA_TESTBED_TEMP=str(local_scratch), HYDRIA_LAYERED_IMAGES=layered)
    if layered == "n":
        assert first.startswith("/scratch/hydria-slurm-") and "/image.sqsh\n" in first  # imported there
    else:
        assert first.startswith("PRETTY_NAME=") and any(srun.workspace.cache.glob("images.*/*.layers")), first
    second = srun.ok(*options, *look, HYDRIA_TESTBED_TEMP=str(local_scratch), HYDRIA_LAYERED_IMAGES=layered)
    assert ".sqsh" not in second  # no copy this time
    assert "hydria busybox test image" in second


def test_a_scratch_folder_another_user_made_first_is_passed_by(srun: Srun, busybox: PublishedImage,
                                                                other_workspace: Workspace) -> None:
    """In a shared /tmp anyone can make hydria-slurm-UID before the user: the steps use a folder
    in the user's cache then, rather than fail."""
    shared = srun.workspace.root / "shared-tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    squatted = shared / f"hydria-slurm-{srun.workspace.user.uid}"
    assert run_as(other_workspace.user, ["mkdir", "-m", "777", str(squatted)]).returncode == 0
    out = srun.ok(f"--container-image={busybox.docker_uri}", "cat", "/etc/os-release", HYDRIA_TESTBED_TEMP=str(shared))
    assert "hydria busybox test image" in out
    assert list(squatted.iterdir()) == []
    assert list((srun.workspace.cache).glob("slurm-*")) != []


def test_the_container_inherits_no_descriptor_of_slurmstepd(srun: Srun, images: dict[str, Path]) -> None:
    """The shim runs `hydria slurm start` with standard input, output and error and nothing else
    of slurmstepd's (nor its protocol descriptor, which hydria closes): the step's container, whose
    first process holds it for the tasks, has no other descriptor open."""
    uid = srun.workspace.user.uid
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        step = pool.submit(srun, f"--container-image={images['busybox']}", "sleep", "3")
        holder = _step_holder(uid)
        descriptors = sorted(int(fd) for fd in os.listdir(f"/proc/{holder}/fd"))
        assert step.result().returncode == 0
    assert descriptors == [0, 1, 2]


def _step_holder(uid: int, wait: float = 30) -> int:
    """The stopped first process of a step's container (slurm/step.py's STOP_COMMAND)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = Path(f"/proc/{entry}/status").read_text()
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if f"\nUid:\t{uid}\t" in status and "\nState:\tT" in status and b"kill -STOP" in command:
                return int(entry)
        time.sleep(0.05)
    raise AssertionError("the step's container did not start")


@pytest.mark.parametrize("remap", [[], ["--container-remap-root"]])
def test_tasks_have_the_seccomp_filter(srun: Srun, images: dict[str, Path], remap: list[str]) -> None:
    out = srun.ok("-n", "2", f"--container-image={images['busybox']}", *remap, "sh", "-c",
                  "grep '^Seccomp:' /proc/self/status; touch /tmp/f$SLURM_PROCID; "
                  "chown 123:456 /tmp/f$SLURM_PROCID && stat -c %u /tmp/f$SLURM_PROCID")
    owner = "0" if remap else str(srun.workspace.user.uid)
    assert sorted(out.splitlines()) == sorted(["Seccomp:\t2", "Seccomp:\t2", owner, owner])


def test_registry_image_and_cleanup(srun: Srun, busybox: PublishedImage, test_user: User) -> None:
    image = busybox.docker_uri.removeprefix("docker://")
    result = srun(f"--container-image={image}", "cat", "/etc/os-release")
    assert result.returncode == 0 and "hydria busybox test image" in result.stdout, result.stderr
    # pyxis's log lines (the first only for steps of one task)
    assert f"hydria: importing docker image: {image}" in result.stderr, result.stderr
    assert f"hydria: imported docker image: {image}" in result.stderr
    result = srun("-n", "2", f"--container-image={image}", "true")
    assert "importing" not in result.stderr and f"hydria: imported docker image: {image}" in result.stderr, \
        result.stderr
    result = srun(f"--container-image={image.rsplit(':', 1)[0]}:nosuchtag", "true")
    assert result.returncode != 0 and "hydria: failed to import docker image: " in result.stderr, result.stderr
    assert "@log" not in result.stderr and "@cleanup" not in result.stderr  # the shim's marks stay inside
    scratch = Path(tempfile.gettempdir(), f"hydria-slurm-{test_user.uid}")
    def steps_left() -> list[str]:
        return [p.name for p in scratch.iterdir() if p.name != "rc.local"]  # rc.local: shared by the steps

    deadline = time.monotonic() + 10  # the cleanup runs detached from the step's end
    while steps_left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert scratch.is_dir() and steps_left() == []  # the imported image went with the step
    assert subprocess.run(["pgrep", "-u", str(test_user.uid), "-f", "kill -STOP"],
                          capture_output=True, check=False).returncode == 1  # no holder process left behind


def test_every_task_of_the_step(srun: Srun, images: dict[str, Path]) -> None:
    out = srun.ok("-n", "2", f"--container-image={images['busybox']}", "sh", "-c",
                  "echo task $SLURM_PROCID $(cat /etc/os-release | head -1)")
    assert sorted(out.splitlines()) == [f'task {i} PRETTY_NAME="hydria busybox test image"' for i in (0, 1)]


def test_mounts_and_workdir(srun: Srun, images: dict[str, Path]) -> None:
    data = srun.workspace.out / "with space"
    data.mkdir()
    (data / "hello").write_text("from the host\n")
    subprocess.run(["chown", "-R", f"{srun.workspace.user.uid}", str(data)], check=True)
    image = f"--container-image={images['busybox']}"
    assert srun.ok(image, f"--container-mounts={data}:/data:ro", "cat", "/data/hello") == "from the host\n"
    result = srun(image, f"--container-mounts={data}:/data:ro", "touch", "/data/x")
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert srun.ok(image, "--container-mounts=./with space:/rel", "cat", "/rel/hello") == "from the host\n"
    assert srun.ok(image, "--container-mounts=tmpfs:/scratch", "sh", "-c", "touch /scratch/a && echo ok") == "ok\n"
    assert srun.ok(image, "--container-workdir=/etc", "pwd") == "/etc\n"
    # the HYDRIA_CONTAINER_* variables are defaults for options not given (pyxis's PYXIS_CONTAINER_*)
    assert srun.ok("pwd", HYDRIA_CONTAINER_IMAGE=str(images["busybox"]), HYDRIA_CONTAINER_WORKDIR="/etc") == "/etc\n"
    result = srun(image, "--container-mounts=/nonexistent/dir:/x", "true")
    assert result.returncode != 0 and "--container-mounts: source path does not exist: /nonexistent/dir" in result.stderr
    result = srun(image, "--container-workdir=/nonexistent", "true")
    assert result.returncode != 0 and "couldn't chdir to /nonexistent" in result.stderr
    result = srun(image, f"--container-mounts={data}:/data:r0", "touch", "/data/x")  # ro mistyped
    assert result.returncode != 0 and f"failed to mount: {data} at /data: 'r0' is no option of a bind mount" \
        in result.stderr


def test_environment_and_entrypoint(srun: Srun, images: dict[str, Path]) -> None:
    image = f"--container-image={images['debian']}"
    env = srun.ok(image, "env", FOO="bar", GREETING="from the host")
    assert "FOO=bar" in env  # host-only variables pass through
    assert "GREETING=hello world" in env  # the image's value wins ...
    assert "HYDRIA_ENTRYPOINT" not in env  # ... and the entrypoint does not run by default
    env = srun.ok(image, "--container-env=GREETING", "--container-entrypoint", "env", GREETING="from the host")
    assert "GREETING=from the host" in env and "HYDRIA_ENTRYPOINT=ran" in env
    env = srun.ok(image, "env", GREETING="from the host", HYDRIA_CONTAINER_ENV="GREETING")
    assert "GREETING=from the host" in env  # the environment default of --container-env
    assert srun.ok(image, "pwd") == "/opt/hydria-test\n"  # the image's WORKDIR


def test_home_under_remap_root_and_its_unmount(srun: Srun, images: dict[str, Path]) -> None:
    """As pyxis with enroot: the home is at /root under remap-root, and "umount:/root" removes it."""
    image = f"--container-image={images['busybox']}"
    home = srun.workspace.user.home
    assert srun.ok(image, "--container-mount-home", "--container-remap-root", "grep", "-c", " /root ",
                   "/proc/self/mounts", HOME=str(home)) == "1\n"
    gone = srun(image, "--container-mount-home", "--container-remap-root", "--container-mounts=umount:/root",
                "grep", "-c", " /root ", "/proc/self/mounts", HOME=str(home))
    assert gone.stdout == "0\n", gone.stderr


def test_remap_root_and_writable(srun: Srun, images: dict[str, Path]) -> None:
    image = f"--container-image={images['busybox']}"
    assert srun.ok(image, "--container-remap-root", "id", "-u") == "0\n"
    assert srun(image, "touch", "/x").returncode != 0
    assert srun.ok(image, "--container-writable", "sh", "-c", "touch /x && echo ok") == "ok\n"


def test_named_container_persists_across_steps(srun: Srun, images: dict[str, Path]) -> None:
    image = f"--container-image={images['busybox']}"
    made = srun(image, "--container-name=keep", "--container-writable", "sh", "-c", "echo kept > /state")
    assert made.returncode == 0 and "hydria: creating container filesystem: pyxis_keep" in made.stderr
    assert srun.ok("--container-name=keep", "cat", "/state") == "kept\n"
    result = srun(image, "--container-name=keep:create", "true")
    assert result.returncode != 0 and '"create" flag was passed' in result.stderr
    result = srun("--container-name=absent", "true")
    assert result.returncode != 0 and 'with name "pyxis_absent" does not exist' in result.stderr


def test_cancelled_step_leaves_nothing_behind(srun: Srun, images: dict[str, Path]) -> None:
    out = srun.workspace.out
    script = (f"srun -n 2 --container-image={images['busybox']} --container-name=cancelled "
              f"--container-mounts={out}:/out sh -c 'touch /out/started.$SLURM_PROCID; exec sleep 300' & "
              "for i in $(seq 100); do [ -e started.0 ] && [ -e started.1 ] && break; sleep 0.1; done; "
              "scancel $SLURM_JOB_ID; wait")
    result = srun.submitter.run("salloc", "-n", "2", "sh", "-c", script)
    assert (out / "started.0").exists() and (out / "started.1").exists(), result.stderr
    assert live_processes(srun.workspace.user, wait=15) == []  # no task, stopped holder or squashfuse
    assert srun.ok("--container-name=cancelled", "head", "-1", "/etc/os-release").startswith("PRETTY_NAME")


def test_attach_to_a_running_container(srun: Srun, images: dict[str, Path]) -> None:
    """auto and :exec join the running container's namespaces, :no_exec starts another; as pyxis."""
    step = "srun -n 1 --overlap --container-name=live"
    script = (f"{step} --container-image={images['busybox']} --container-mounts={srun.workspace.out}:/out "
              "sh -c 'readlink /proc/self/ns/mnt > /out/first; while [ ! -e /out/done ]; do sleep 0.1; done' & "
              "while [ ! -s first ]; do sleep 0.1; done; "
              f"{step}:exec readlink /proc/self/ns/mnt; {step} readlink /proc/self/ns/mnt; "
              f"{step}:no_exec readlink /proc/self/ns/mnt; {step} --container-unshare=net true; echo rc=$?; "
              "touch done; wait")
    out = srun.submitter.ok("salloc", "-n", "2", "sh", "-c", script)
    first = (srun.workspace.out / "first").read_text().strip()
    lines = out.splitlines()
    assert lines[0] == first and lines[1] == first  # :exec and auto joined it
    assert lines[2].startswith("mnt:[") and lines[2] != first  # :no_exec has its own
    assert lines[3] == "rc=1"
    result = srun("--container-name=live:exec", "true")  # nothing runs any more
    assert result.returncode != 0 and '"exec" flag was passed to --container-name but the container is not ' \
        'running' in result.stderr


def test_pytorch_ranks(srun: Srun, images: dict[str, Path]) -> None:
    image = f"--container-image={images['busybox']}"
    out = srun.ok("-n", "2", image, "sh", "-c", "echo $SLURM_PROCID:$RANK:$LOCAL_RANK", PYTORCH_VERSION="2.1")
    assert sorted(out.split()) == ["0:0:0", "1:1:1"]
    # torch.distributed's env:// rendezvous, as enroot's 50-slurm-pytorch hook sets it
    out = srun.ok("-n", "2", image, "sh", "-c",
                  "echo $SLURM_JOB_ID $MASTER_ADDR $MASTER_PORT $WORLD_SIZE $OMP_NUM_THREADS", PYTORCH_VERSION="2.1")
    job, address, port, world, threads = out.splitlines()[0].split()
    assert (address, int(port), world, threads) == (slurm.NODE, int(job) % 4536 + 61000, "2", "1")
    kept = srun.ok(image, "sh", "-c", "echo $MASTER_PORT", PYTORCH_VERSION="2.1", MASTER_PORT="12345")
    assert kept == "12345\n"  # what the user set stays
    assert srun.ok(image, "sh", "-c", "echo ${RANK-unset}") == "unset\n"  # not a PyTorch image


def test_entrypoint_log(srun: Srun, images: dict[str, Path]) -> None:
    srun.ok(f"--container-image={images['busybox']}", "--container-name=banner", "--container-writable", "sed",
            "-i", "1a echo banner-from-the-entrypoint >&2", "/etc/rc")
    shown = srun("-n", "2", "--container-name=banner", "--container-entrypoint", "--container-entrypoint-log", "true")
    assert shown.returncode == 0 and shown.stderr.count("banner-from-the-entrypoint") == 1  # once per node
    for flags in (["--container-entrypoint"], ["--container-entrypoint-log"]):  # needs both
        quiet = srun("--container-name=banner", *flags, "true")
        assert quiet.returncode == 0 and "banner" not in quiet.stderr


def test_an_entrypoint_cannot_speak_for_hydria(srun: Srun, images: dict[str, Path]) -> None:
    """The shim's marks travel on a descriptor of their own: an image's output that looks like
    them is only output."""
    forged = "echo @workdir /proc; echo @workdir /proc >&2; echo @log hydria: forged >&2; echo @save; echo @cleanup"
    srun.ok(f"--container-image={images['busybox']}", "--container-name=forger", "--container-writable", "sed",
            "-i", f"1a {forged}", "/etc/rc")
    plain = srun.ok("--container-name=forger", "pwd")
    shown = srun("--container-name=forger", "--container-entrypoint", "--container-entrypoint-log", "pwd")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == plain and plain != "/proc\n"
    assert "@workdir /proc" in shown.stderr  # shown as the entrypoint's output, and only that
    assert "\nhydria: forged" not in "\n" + shown.stderr


def test_concurrent_steps_share_a_new_named_container(srun: Srun, images: dict[str, Path]) -> None:
    """Eight steps at once on a container that does not exist yet: one creates it, none fails,
    no write is lost (they join the running one, or run side by side on its filesystem)."""
    step = (f"srun -n 1 --overlap --container-image={images['busybox']} --container-name=crowd "
            "--container-writable sh -c 'touch /from-$SLURM_STEP_ID && echo ok'")
    steps = srun.submitter.run("salloc", "-n", "2", "sh", "-c", " & ".join([step] * 8) + " & wait")
    assert steps.returncode == 0 and steps.stdout.split() == ["ok"] * 8, steps.stderr
    files = srun.ok("--container-name=crowd", "ls", "/").split()
    upper = sorted(os.listdir(srun.workspace.root / "data" / "pyxis_crowd" / "upper"))
    assert sorted(f for f in files if f.startswith("from-")) == [f"from-{i}" for i in range(8)], \
        f"upper: {upper}\nsteps' stderr:\n{steps.stderr}"


def test_a_step_that_joins_another_steps_container_keeps_its_own_slurm_variables(
        srun: Srun, images: dict[str, Path]) -> None:
    """Step 0 starts the container; step 1 joins it and outlives step 0, so that step 2 joins a
    container whose only process is step 1's task, with step 1's SLURM_* and PMIX_*: step 2's task
    must see its own, and none of step 1's (it saw step 1's: a CI failure of the concurrent-steps
    test)."""
    step = f"srun -n 1 --overlap --container-image={images['busybox']} --container-name=joined sh -c"
    script = (f"{step} 'sleep 2' & sleep 1; PMIX_HYDRIA_TEST=step1 {step} 'sleep 4' & sleep 3; "
              f"{step} 'echo $SLURM_STEP_ID ${{PMIX_HYDRIA_TEST-unset}}'; wait")
    assert srun.submitter.ok("salloc", "-n", "2", "sh", "-c", script) == "2 unset\n"


def test_a_job_cannot_change_the_sites_settings(srun: Srun, busybox: PublishedImage, workspace: Workspace) -> None:
    """Plain HTTP, the paths and the other site settings come from the administrator's files
    (here testbed/slurm.py's): not from the job's environment, nor from the user's hydria.conf."""
    elsewhere = workspace.root / "elsewhere"
    (workspace.root / "config" / "hydria.conf").write_text(f"HYDRIA_ALLOW_HTTP n\nHYDRIA_DATA_PATH {elsewhere}\n")
    image = busybox.docker_uri.removeprefix("docker://")
    result = srun(f"--container-image={image}", "--container-name=site", "true", HYDRIA_ALLOW_HTTP="n",
                  HYDRIA_DATA_PATH=str(elsewhere), ENROOT_DATA_PATH=str(elsewhere), HYDRIA_SYSCONF_PATH=str(elsewhere))
    assert result.returncode == 0, result.stderr  # the registry is plain HTTP: the site allows it
    assert "ignoring" not in result.stderr  # silent, as pyxis: job output stays the program's
    assert [p.name for p in (workspace.root / "data").iterdir()] == ["pyxis_site"] and not elsewhere.exists()
    failed = srun("--container-image=/nonexistent.sqsh", "true", HYDRIA_ALLOW_HTTP="n", HYDRIA_DATA_PATH=str(elsewhere))
    for name in ("HYDRIA_ALLOW_HTTP", "HYDRIA_DATA_PATH"):  # said where it may explain a failure
        assert f"hydria: ignoring {name} from the job's environment or your hydria.conf" in failed.stderr


def test_pyxis_variables_choose_the_container(srun: Srun, images: dict[str, Path]) -> None:
    """A job script written for pyxis, exporting PYXIS_CONTAINER_*, runs in the container."""
    image = str(images["busybox"])
    assert "hydria busybox test image" in srun.ok("cat", "/etc/os-release", PYXIS_CONTAINER_IMAGE=image)
    assert srun.ok("pwd", PYXIS_CONTAINER_IMAGE=image, PYXIS_CONTAINER_WORKDIR="/etc") == "/etc\n"
    assert srun.ok("touch", "/new", PYXIS_CONTAINER_IMAGE=image, PYXIS_CONTAINER_READONLY="0") == ""
    refused = srun("touch", "/new", PYXIS_CONTAINER_IMAGE=image, PYXIS_CONTAINER_WRITABLE="0")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    # The image sets PATH=/bin; the job's is kept when named (srun itself is found on it).
    path = ":".join([*([f"{SLURM_PREFIX}/bin"] if SLURM_PREFIX else []), "/bin", "/usr/bin", "/job-bin"])
    assert srun.ok("sh", "-c", "echo $PATH", PYXIS_CONTAINER_IMAGE=image, PYXIS_CONTAINER_ENV="PATH", PATH=path) == \
        f"{path}\n"


def test_container_save(srun: Srun, images: dict[str, Path]) -> None:
    data = Path(srun.workspace.env()["HYDRIA_TESTBED_DATA"])
    srun.ok(f"--container-image={images['busybox']}", "--container-writable", "--container-save=saved.sqsh",
            "sh", "-c", "echo from-step > /result")
    saved = srun.workspace.out / "saved.sqsh"  # relative to the job's working directory
    assert srun.ok(f"--container-image={saved}", "cat", "/result") == "from-step\n"
    assert not data.exists() or list(data.iterdir()) == []  # the temporary container went with the step
    # a named container, all tasks writing, saved over the image it started from
    srun.ok("-n", "2", f"--container-image={saved}", "--container-name=tosave", "--container-writable",
            f"--container-save={saved}", "sh", "-c", "touch /task$SLURM_PROCID")
    assert {"result", "task0", "task1"} <= set(srun.ok(f"--container-image={saved}", "ls", "/").split())
    result = srun(f"--container-image={images['busybox']}", "--container-save=/nonexistent/x.sqsh", "true")
    assert "failed to export container pyxis_" in result.stderr and "/nonexistent" in result.stderr
    # said when the step starts too, not only after the job's work
    assert "hydria: warning: --container-save=/nonexistent/x.sqsh cannot be written as things are (No such file " \
           "or directory: /nonexistent)" in result.stderr
    assert result.stderr.index("warning: --container-save") < result.stderr.index("failed to export")


@pytest.mark.parametrize(("option", "message"), [
    ("--container-mounts=mnt", "mount source must be a relative path"),
    ("--container-mounts=/tmp:mnt", "mount target must be a relative path or an absolute path"),
    ("--container-mounts=/tmp:", "--container-mounts: invalid format: /tmp:"),
    ("--container-name=:exec", "--container-name: empty name"),
    ("--container-name=x:attach", '--container-name: flag must be "auto", "create", "exec" or "no_exec"'),
    ("--container-save=/tmp/", "--container-save: target is a directory"),
    ("--container-env=A,,B", "--container-env: invalid format: A,,B"),
    ("--container-unshare=pid", "--container-unshare: unknown namespace 'pid'"),
])
def test_invalid_options_fail_on_the_submit_side(srun: Srun, images: dict[str, Path], option: str,
                                                 message: str) -> None:
    result = srun(f"--container-image={images['busybox']}", option, "true")
    assert result.returncode != 0 and f"hydria: {message}" in result.stderr


def test_an_image_file_named_without_a_path_is_explained(srun: Srun, images: dict[str, Path]) -> None:
    """pyxis reads ``app.sqsh`` as a registry image (a path starts with / or .): say so."""
    shutil.copy(images["busybox"], srun.workspace.out / "app.sqsh")
    result = srun("--container-image=app.sqsh", "true")  # refused before any registry is asked
    assert result.returncode != 0
    assert "hydria: --container-image=app.sqsh names a registry image, and a file of that name is here" in result.stderr
    assert "hint: for the file, write --container-image=./app.sqsh: an image path starts with / or ." in result.stderr
    assert srun.ok("--container-image=./app.sqsh", "true") == ""


def test_bad_image_fails_the_step(srun: Srun) -> None:
    result = srun("-n", "2", "--container-image=/nonexistent.sqsh", "true")
    assert result.returncode != 0  # said once, not once per task
    assert result.stderr.count("hydria: --container-image: no such file: /nonexistent.sqsh") == 1, result.stderr


def test_jobs_without_container_options_are_untouched(srun: Srun) -> None:
    assert srun.ok("cat", "/etc/debian_version").strip()[0].isdigit()


def test_privileged_root_jobs(cluster: None, images: dict[str, Path], tmp_path: Path) -> None:
    # root's step with HYDRIA_ALLOW_SUPERUSER, as pyxis's privileged mode: no user namespace, no filter
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(slurm.CONF), "HYDRIA_TESTBED_DATA": str(tmp_path / "data")}
    show = ["sh", "-c", "cat /proc/self/uid_map; grep '^Seccomp:' /proc/self/status"]
    privileged = subprocess.run(["srun", f"--container-image={images['busybox']}", *show], capture_output=True,
                                text=True, env={**env, "HYDRIA_TESTBED_SUPERUSER": "y"}, cwd=tmp_path, timeout=120,
                                check=False)
    assert privileged.stdout.split() == ["0", "0", "4294967295", "Seccomp:", "0"], privileged.stderr
    plain = subprocess.run(["srun", f"--container-image={images['busybox']}", *show], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert plain.stdout.split() == ["0", "0", "1", "Seccomp:", "2"], plain.stderr


def test_cdi_devices(srun: Srun, images: dict[str, Path]) -> None:
    """--container-device (hydria's own option: docs/devices.md) gives the step's container the
    devices of the site's CDI specs; HYDRIA_CONTAINER_DEVICE is its default."""
    specs = srun.workspace.root / "cdi"
    specs.mkdir()
    (specs / "x.json").write_text(json.dumps({
        "cdiVersion": "0.6.0", "kind": "example.com/x",
        "devices": [{"name": "a", "containerEdits": {"env": ["X_DEVICE=a"], "deviceNodes": [{"path": "/dev/zero"}]}}]}))
    image = f"--container-image={images['busybox']}"
    assert srun.ok(image, "--container-device=example.com/x=a", "sh", "-c", "echo $X_DEVICE",
                   HYDRIA_TESTBED_CDI=str(specs)) == "a\n"
    assert srun.ok(image, "sh", "-c", "echo $X_DEVICE", HYDRIA_TESTBED_CDI=str(specs),
                   HYDRIA_CONTAINER_DEVICE="example.com/x=a") == "a\n"
    missing = srun(image, "--container-device=example.com/x=b", "true", HYDRIA_TESTBED_CDI=str(specs))
    assert missing.returncode != 0 and "no such CDI device: example.com/x=b" in missing.stderr
    assert "this node has example.com/x=a" in missing.stderr


def test_steps_use_layered_images(srun: Srun, busybox: PublishedImage, registry: Registry, tmp_path: Path) -> None:
    """With HYDRIA_LAYERED_IMAGES, a step's image is a layered image in the cache whose layer
    images the next version's step shares (docs/import.md), in a named container too."""
    tmp_path.chmod(0o755)
    repository = f"hydria/steps{uuid.uuid4().hex[:12]}"
    for version in ("v1", "v2"):
        tar = tmp_path / f"{version}.tar"
        with LayerTar(tar) as layer:
            layer.directory("opt")
            layer.file("opt/version", f"{version}\n")
        push([Image([*busybox.image.layers, make_layer(tar, tmp_path)], {"Cmd": ["/bin/sh"]})], registry.address,
             repository, version, srun.workspace.root)
    kept = srun.workspace.cache / f"images.{srun.workspace.user.uid}"
    image = f"{registry.address}#{repository}"
    assert srun.ok(f"--container-image={image}:v1", "cat", "/opt/version", HYDRIA_LAYERED_IMAGES="y") == "v1\n"
    layers = {path.name: path.stat().st_ino for path in kept.glob("layer-*")}
    assert [path.suffix for path in kept.iterdir() if not path.name.startswith(("layer-", "."))] == [".layers"]
    out = srun.ok(f"--container-image={image}:v2", "--container-name=layered", "cat", "/opt/version",
                  HYDRIA_LAYERED_IMAGES="y")
    assert out == "v2\n"
    now = {path.name: path.stat().st_ino for path in kept.glob("layer-*")}
    assert len(set(now) - set(layers)) == 2, "v2's own layer and runtime files: the rest is v1's"
    assert all(now[name] == inode for name, inode in layers.items())
    assert srun.ok("--container-name=layered", "cat", "/opt/version") == "v2\n"
