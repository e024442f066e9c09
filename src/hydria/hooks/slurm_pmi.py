"""The built-in Slurm hook (enroot's ``50-slurm-pmi.sh``): a program that a Slurm step starts in
a container (``srun hydria start IMAGE PROGRAM``, or a task of the Slurm plugin) sees the step's
``SLURM_*`` variables and reaches the step's PMI server.

* PMIx (``srun --mpi=pmix``): the ``PMIX_*`` variables pass in, the ``PMIX_MCA_*`` selections
  that Slurm's server advertises are made explicit (as enroot's hook does), and the server's
  directory (``PMIX_SERVER_TMPDIR``, in slurmd's spool) and the step's application directory
  (``spmix_appdir_UID_JOB.STEP`` in ``PMIX_SYSTEM_TMPDIR``) are bind-mounted at the same paths.
* PMI2 (``srun --mpi=pmi2``): ``PMI_FD`` is a descriptor the program inherits; the ``PMI_*``
  variables pass in.

Outside a Slurm step there is nothing to do. The per-task values (``SLURM_PROCID``,
``PMIX_RANK``, ``PMI_FD``, ...) pass in only when the caller has them: the Slurm plugin starts
the step's container before Slurm sets them, and each task keeps its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hydria.runtime.fstab import MountEntry

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
        directories = [host.get("PMIX_SERVER_TMPDIR", "").rstrip("/"),
                       f"{host.get('PMIX_SYSTEM_TMPDIR', '/tmp')}/spmix_appdir_{os.getuid()}_{job}.{step}"]
        mounts = [MountEntry(path, path, "none", BIND, origin="slurm")
                  for path in directories if path and os.path.isdir(path)]
    return environment, mounts
