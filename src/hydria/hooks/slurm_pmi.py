"""The built-in Slurm hook (enroot's ``50-slurm-pmi.sh``): a program that a Slurm step starts in
a container (``srun hydria start IMAGE PROGRAM``, or a task of the Slurm plugin) sees the step's
``SLURM_*`` variables and reaches the step's PMI server.

* PMIx (``srun --mpi=pmix``): the ``PMIX_*`` variables pass in, the ``PMIX_MCA_*`` selections
  that Slurm's server advertises are made explicit (as enroot's hook does), and the server's
  directory (``PMIX_SERVER_TMPDIR``, in slurmd's spool) and the step's application directory
  (``spmix_appdir_UID_JOB.STEP``, which Open MPI makes its session directory) are bind-mounted at
  the same paths. Slurm makes the latter in slurm.conf's ``TmpFS``, which enroot's hook does not
  look at (it looks in ``PMIX_SYSTEM_TMPDIR`` only, so a cluster whose TmpFS is not /tmp breaks
  Open MPI there); hydria looks in TmpFS, then ``PMIX_SYSTEM_TMPDIR``, ``TMPDIR`` and /tmp.
* PMI2 (``srun --mpi=pmi2``): ``PMI_FD`` is a descriptor the program inherits; the ``PMI_*``
  variables pass in.

Outside a Slurm step there is nothing to do. The per-task values (``SLURM_PROCID``,
``PMIX_RANK``, ``PMI_FD``, ...) pass in only when the caller has them: the Slurm plugin starts
the step's container before Slurm sets them, and each task keeps its own.
"""

from __future__ import annotations

import os

from hydria.record import TYPE_CHECKING, Record
from hydria.runtime.edits import Edits, StartContext
from hydria.runtime.fstab import MountEntry

if TYPE_CHECKING:
    from collections.abc import Mapping

PASSED_PREFIXES = ("SLURM_", "PMIX_", "PMI_")
PMIX_SELECTIONS = {"PMIX_MCA_ptl": "PMIX_PTL_MODULE", "PMIX_MCA_psec": "PMIX_SECURITY_MODE",
                   "PMIX_MCA_gds": "PMIX_GDS_MODULE"}
BIND = ("x-create=dir", "bind", "rw", "nosuid", "nodev", "noexec")


def run(host: Mapping[str, str]) -> tuple[dict[str, str], list[MountEntry]]:
    """The variables the container's environment gets, and the mounts to make."""
    job, step = host.get("SLURM_JOB_ID"), host.get("SLURM_STEP_ID")
    if not job or not step:
        return {}, []
    environment = {name: value for name, value in host.items() if name.startswith(PASSED_PREFIXES)}
    mounts = []
    if any(name.startswith("PMIX_") for name in host):
        for selection, advertised in PMIX_SELECTIONS.items():
            if advertised in host and selection not in host:
                environment[selection] = host[advertised]
        mounts = pmix_mounts(host)
    return environment, mounts


def edits(context: StartContext) -> Edits:
    environment, mounts = run(context.host)
    return Edits(tuple(environment.items()), tuple(mounts))


class PmixDirectories(Record):
    """The step's PMIx directories that exist ("" for one that does not)."""

    server: str  # the server's (PMIX_SERVER_TMPDIR)
    application: str  # Open MPI's session directory


def pmix_mounts(host: Mapping[str, str]) -> list[MountEntry]:
    """Binds of the step's PMIx server directory and application directory, those that exist."""
    return binds(pmix_directories(host))


def binds(directories: PmixDirectories) -> list[MountEntry]:
    return [MountEntry(path, path, "none", BIND, origin="slurm") for path in directories if path]


def pmix_directories(host: Mapping[str, str]) -> PmixDirectories:
    """The step's PMIx server directory and application directory. The Slurm plugin's step
    container starts before Slurm sets the tasks' ``PMIX_*`` variables; both directories exist
    then (the server's found in slurmd's spool), and ``SLURM_PMIX_*`` or ``SLURM_MPI_TYPE`` tell."""
    job, step = host.get("SLURM_JOB_ID"), host.get("SLURM_STEP_ID")
    if not job or not step or not (host.get("SLURM_MPI_TYPE", "").startswith("pmix") or
                                   any(name.startswith(("PMIX_", "SLURM_PMIX")) for name in host)):
        return PmixDirectories("", "")
    conf = _slurm_conf(host)
    server = host.get("PMIX_SERVER_TMPDIR", "").rstrip("/") or _server_directory(host, conf, job, step)
    bases = [conf.get("tmpfs"), host.get("PMIX_SYSTEM_TMPDIR"), host.get("TMPDIR"), "/tmp"]
    names = [f"spmix_appdir_{os.getuid()}_{job}.{step}", f"spmix_appdir_{job}.{step}"]
    application = next((path for base in bases if base for name in names
                        if os.path.isdir(path := f"{base.rstrip('/')}/{name}")), "")
    return PmixDirectories(server if os.path.isdir(server) else "", application)


def _server_directory(host: Mapping[str, str], conf: Mapping[str, str], job: str, step: str) -> str:
    """Where Slurm's PMIx plugin keeps the step's server directory (``PMIX_SERVER_TMPDIR``, which
    only the tasks are told): ``SlurmdSpoolDir/pmix.JOB.STEP``, made before the step's container."""
    spool = conf.get("slurmdspooldir") or "/var/spool/slurmd"
    # The node's Slurm name: the tasks' SLURMD_NODENAME, else the end of the step's topology
    # address (set for every node before the tasks), else the host name.
    node = host.get("SLURMD_NODENAME") or host.get("SLURM_TOPOLOGY_ADDR", "").rpartition(".")[2] or os.uname().nodename
    spool = spool.replace("%n", node).replace("%h", os.uname().nodename)
    return f"{spool.rstrip('/')}/pmix.{job}.{step}"


def _slurm_conf(host: Mapping[str, str]) -> dict[str, str]:
    """The settings of the cluster's slurm.conf (names in lower case; the first of each wins, empty
    when set to nothing), read once for all that a step needs; none when it cannot be read."""
    settings: dict[str, str] = {}
    try:
        with open(host.get("SLURM_CONF") or "/etc/slurm/slurm.conf") as conf:
            for line in conf:
                key, _, value = line.partition("=")
                settings.setdefault(key.strip().lower(), value.split("#")[0].strip())
    except OSError:
        pass
    return settings
