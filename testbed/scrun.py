"""Slurm's ``scrun`` on the test cluster: rootless podman as a test user, with scrun as its OCI
runtime, and hydria's oci.conf and scrun.lua beside the cluster's slurm.conf (docs/slurm.md).

``podman run`` then asks scrun to create and start the container; scrun gets a job from
slurmctld and runs ``srun --container=BUNDLE`` in it, which runs hydria on the node. Needs a
Slurm built with scrun (23.02 and newer, configured with Lua) under ``HYDRIA_TEST_SLURM_PREFIX``
and Debian's podman; Debian's Slurm 22.05 has no scrun.

Two things are the test cluster's alone: podman runs its runtime, and scrun runs srun, without the
caller's environment, so the cluster's slurm.conf (not the default path) is named by two small
wrappers, and srun is the release under test (oci.conf's ``SrunPath``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testbed import slurm
from testbed.users import SLURM_PREFIX, run_as
from testbed.workspace import Workspace

IMAGE = "localhost/busybox:scrun"
# Slurm's containers guide's containers.conf for podman with scrun (cgroupfs: no systemd here).
CONTAINERS_CONF = """[containers]
apparmor_profile = "unconfined"
cgroupns = "host"
cgroups = "enabled"
default_sysctls = []
label = false
netns = "host"
no_hosts = true
pidns = "host"
utsns = "host"
userns = "host"
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "slurm"
remote = false

[engine.runtimes]
slurm = ["{scrun}"]
"""
# The vfs driver: a root file system that slurmstepd can see, outside podman's mount namespace.
STORAGE_CONF = """[storage]
driver = "vfs"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""
WRAPPER = '#!/bin/sh\nexport SLURM_CONF={conf}\nexec {program} "$@"\n'


def missing() -> str | None:
    """Why scrun cannot be tested here, or None."""
    if not SLURM_PREFIX or not Path(SLURM_PREFIX, "bin", "scrun").exists():
        return ("the Slurm under test has no scrun: run with HYDRIA_TEST_SLURM_PREFIX naming a Slurm 23.02 or "
                "newer built with Lua (docs/slurm.md)")
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman)"
    return None


def prepare(workspace: Workspace, hydria: str, busybox: Path) -> dict[str, str]:
    """Install hydria's oci.conf and scrun.lua on the cluster, configure podman for the
    workspace's user and give it the busybox image as ``IMAGE``; the environment its podman
    commands take."""
    assert SLURM_PREFIX
    wrappers = {}
    for program in ("scrun", "srun"):
        wrappers[program] = slurm.ROOT / program
        wrappers[program].write_text(WRAPPER.format(conf=slurm.CONF, program=Path(SLURM_PREFIX, "bin", program)))
        wrappers[program].chmod(0o755)
    conf = _hydria(hydria, "conf") + f'SrunPath={wrappers["srun"]}\n'
    (slurm.ROOT / "oci.conf").write_text(conf)
    (slurm.ROOT / "scrun.lua").write_text(_hydria(hydria, "scrun-lua"))
    podman = workspace.root / "podman"
    config = podman / "config" / "containers"
    run_as(workspace.user, ["mkdir", "-p", str(config)], check=True)
    for name, text in (("containers.conf", CONTAINERS_CONF.format(scrun=wrappers["scrun"])),
                       ("storage.conf", STORAGE_CONF.format(root=podman))):
        run_as(workspace.user, ["sh", "-c", f'cat > "{config / name}"'], input=text, check=True)
    env = {"XDG_CONFIG_HOME": str(podman / "config")}
    rootfs = podman / "rootfs"
    # owned by root in the tar: podman maps it to the user, who owns the files on the node too
    unpack = (f'unsquashfs -q -d "{rootfs}" "{busybox}" && '
              f'tar --numeric-owner --owner=0 --group=0 -C "{rootfs}" -cf "{podman}/busybox.tar" .')
    run_as(workspace.user, ["sh", "-c", unpack], check=True)
    run_as(workspace.user, ["podman", "import", str(podman / "busybox.tar"), IMAGE], env=env, check=True)
    return env


def cleanup(workspace: Workspace) -> None:
    """Remove what :func:`prepare` installed, and end what scrun and podman left running: an
    anchor (``scrun: ID``) whose step failed spins at full speed until killed."""
    for name in ("oci.conf", "scrun.lua", "scrun", "srun"):
        (slurm.ROOT / name).unlink(missing_ok=True)
    for pattern in ("scrun: ", "conmon", "podman"):
        subprocess.run(["pkill", "-9", "-u", str(workspace.user.uid), "-f", pattern], check=False)


def _hydria(hydria: str, action: str) -> str:
    return subprocess.run([hydria, "oci", action], capture_output=True, text=True, check=True).stdout
