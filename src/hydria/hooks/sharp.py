"""The SHARP hook (enroot's extra hook ``50-sharp.sh``), built in: for a Slurm job on a SHARP
network (``SLURM_NETWORK=sharp``) with Mellanox devices requested, the environment that NCCL and
the SHARP collective library need, each variable only where the container does not set it:

* ``SHARP_COLL_LOCK_ON_COMM_INIT=1`` and ``SHARP_COLL_NUM_COLL_GROUP_RESOURCE_ALLOC_THRESHOLD=0``
  (no lazy locking and initialisation);
* ``NCCL_COLLNET_ENABLE=1``;
* ``NCCL_SHARP_GROUP_SIZE_THRESH``: the step's node count (``SLURM_STEP_NUM_NODES``, or Open MPI's
  ``OMPI_MCA_orte_num_nodes`` outside Slurm steps).
"""

from __future__ import annotations

from collections.abc import Mapping

from hydria.hooks.infiniband import requested
from hydria.runtime.edits import Edits, StartContext

FIXED = {"SHARP_COLL_LOCK_ON_COMM_INIT": "1", "SHARP_COLL_NUM_COLL_GROUP_RESOURCE_ALLOC_THRESHOLD": "0",
         "NCCL_COLLNET_ENABLE": "1"}
NODE_COUNTS = ("SLURM_STEP_NUM_NODES", "OMPI_MCA_orte_num_nodes")


def environment(host: Mapping[str, str], container: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to the container's ``container`` environment (none when inactive)."""
    if host.get("SLURM_NETWORK") != "sharp" or requested(host, container) is None:
        return {}
    added = {name: value for name, value in FIXED.items() if name not in container}
    count = next((host[name] for name in NODE_COUNTS if host.get(name)), None)
    if count is not None and "NCCL_SHARP_GROUP_SIZE_THRESH" not in container:
        added["NCCL_SHARP_GROUP_SIZE_THRESH"] = count
    return added


def edits(context: StartContext) -> Edits:
    return Edits(tuple(environment(context.host, context.container).items()))
