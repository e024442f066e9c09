"""``hydria oci run --bundle DIR``: run an OCI bundle's config.json as an ordinary user's
container, in the foreground, as the Slurm task that slurmstepd starts it as (``srun
--container=BUNDLE`` with hydria's ``oci.conf``)."""

from __future__ import annotations

import os
import resource
import signal
from typing import Any

from hydria.config import load_settings
from hydria.container.start import OciProcess, StartOptions, start
from hydria.errors import HydriaError
from hydria.oci.bundle import SETTING_OF_NAMESPACE, OciContainer, load
from hydria.oci.fields import BundleError
from hydria.runtime import syscalls as sc
from hydria.runtime.rootfs import Container


def run(bundle: str) -> None:
    """Start the bundle's container and become its program; returns only by raising HydriaError
    (BundleError for what config.json says)."""
    _die_with_the_task()
    container = load(bundle, os.getuid(), os.getgid())
    # The container's environment is the process's, as Slurm wrote it (its step's environment):
    # hydria's own settings come from it too, as a start in that step would read them; but not
    # its HOME, which is the container's (podman writes HOME=/root): hydria's own files are found
    # from the caller's account.
    unshared: dict[str, Any] = {setting: kind in container.namespaces
                                for kind, setting in SETTING_OF_NAMESPACE.items()}
    host = {name: value for name, value in container.env.items() if name != "HOME"}
    settings = load_settings(host)._replace(
        remap_root=container.as_root, rootfs_writable=not container.readonly, **unshared)
    os.environ.clear()
    os.environ.update(container.env)
    _limit(container)
    name = os.path.basename(os.path.normpath(bundle))
    start(Container(name, None, directory=container.rootfs, overlaid=True),
          StartOptions(target=bundle, command=container.args, entries=container.mounts,
                       oci=OciProcess(container.env, container.cwd, container.hostname, container.confinement)),
          settings)


def _limit(container: OciContainer) -> None:
    if container.umask is not None:
        os.umask(container.umask)
    for index, limit in enumerate(container.rlimits):
        try:
            resource.setrlimit(limit.resource, (limit.soft, limit.hard))
        except (ValueError, OSError) as e:
            raise BundleError(f"process.rlimits[{index}] cannot be set: {e}",
                              hint="a limit above the hard limit that the task has needs root") from None


def _die_with_the_task() -> None:
    """End with whatever slurmstepd started (the task, or the ``/bin/sh -c`` of an oci.conf whose
    RunTimeRun has no ``exec``): scancel's SIGTERM kills such a shell and its SIGKILL follows only
    the task's own processes, which an orphaned hydria is no longer one of. The signal stays set
    through the namespaces and the exec of the container's program; ``--pid``'s PID 1 has its own
    (container/start.py)."""
    parent = os.getppid()
    sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the prctl: nobody waits for this container
        raise HydriaError("the task that ran hydria oci run has ended", hint="nothing to run it for")
