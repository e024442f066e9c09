"""Each task's environment: decided once per step by ``hydria slurm start``, carried out by the shim.

The shim cannot ask Python in every task (a task starts in milliseconds; Python takes tens), and
some values exist only in the task (``SLURM_PROCID``, the ``PMIX_*`` of its rank) or only once the
container's process stopped (its environment, which an entrypoint may have changed). So ``start``
sends a plan: ``@env-...`` marks (hydria.slurm.shim) that the shim's ``apply_env_plan`` carries
out in order, in every task, with no rule of its own:

* ``@env-unset NAME``: remove the task's NAME;
* ``@env-keep NAME``, ``@env-keep-prefix PREFIX``, ``@env-skip-prefix PREFIX``: rules for the
  merge, the first that matches a name wins; ``keep``: the container's value only where the task
  has none; ``skip``: never the container's value; a name no rule matches takes the container's;
* ``@env-merge``: put the container's environment (its stopped process's) over the task's;
* ``@env-if NAME`` ... ``@env-end``: the marks between count only where the task has NAME then;
* ``@env-default NAME=VALUE``: set NAME where the task has none;
* ``@env-copy NAME=FROM``: set NAME to the task's FROM, where it has one;
* ``@env-copy-default NAME=FROM``: the same, only where the task has no NAME.

What the plan says (as pyxis and enroot's hooks): the host's locale goes; the container's
variables win over the job's, except the ``--container-env`` names (the host's value wins where
there is one); a task keeps its own ``SLURM_*``, ``PMI_*`` and ``PMIX_*`` and takes the
container's only when the container's process is of the same step (a container of another step,
which this step joined, has that step's); ``srun --mpi=pmix``: the selections Slurm's PMIx server
advertises (hooks/slurm_pmi.py); PyTorch images: the ranks and torch.distributed's rendezvous.
"""

from __future__ import annotations

from hydria.hooks.slurm_pmi import PASSED_PREFIXES, PMIX_SELECTIONS
from hydria.record import TYPE_CHECKING, Record

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

LOCALE = ("LANG", "LANGUAGE", "LC_ALL")  # the host's locale may not exist in the image
PMIX_TASK = "PMIX_SERVER_TMPDIR"  # a task of a PMIx step has it
PYTORCH_IMAGE = "PYTORCH_VERSION"  # set by PyTorch images (NGC's and the official ones)
PYTORCH_RANKS = {"RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID"}


class StepFacts(Record):
    """What the plan depends on besides the options."""

    job: int
    tasks: int  # the step's tasks on all its nodes (0: not known)
    nodes: int  # the step's nodes (0: not known)
    node_list: str = ""  # SLURM_STEP_NODELIST, a Slurm host list
    foreign: bool = False  # the container's process belongs to another step (a joined container)
    pmix_directory: bool = True  # the container has the step's PMIx server directory


def plan(keep: Sequence[str], facts: StepFacts) -> list[str]:
    """The marks of the plan, in the order the shim applies them; ``keep``: --container-env's names."""
    return [*_merge(keep, facts.foreign), *_pmix(facts.pmix_directory), *_pytorch(facts)]


def _merge(keep: Sequence[str], foreign: bool) -> Iterator[str]:
    yield from (f"@env-unset {name}" for name in LOCALE if name not in keep)
    rule = "@env-skip-prefix" if foreign else "@env-keep-prefix"
    yield from (f"{rule} {prefix}" for prefix in PASSED_PREFIXES)
    yield from (f"@env-keep {name}" for name in keep)
    yield "@env-merge"


def _pmix(has_directory: bool) -> Iterator[str]:
    """The server's selections, unless the user chose. Where the container lacks the server's
    directory (one that another step started), the clients keep their data in their own memory
    (gds "hash") and reach the server over its socket."""
    yield f"@env-if {PMIX_TASK}"
    for selection, advertised in PMIX_SELECTIONS.items():
        if selection == "PMIX_MCA_gds" and not has_directory:
            yield f"@env-default {selection}=hash"
        else:
            yield f"@env-copy-default {selection}={advertised}"
    yield "@env-end"


def _pytorch(facts: StepFacts) -> Iterator[str]:
    """RANK and LOCAL_RANK from Slurm's (as pyxis), and what torch.distributed's env:// rendezvous
    needs, where the user has not set it (as enroot's 50-slurm-pytorch hook): MASTER_ADDR (the
    step's first node), MASTER_PORT (from the job id), WORLD_SIZE, and OMP_NUM_THREADS=1 where a
    node runs several tasks."""
    yield f"@env-if {PYTORCH_IMAGE}"
    yield from (f"@env-copy {name}={source}" for name, source in PYTORCH_RANKS.items())
    if host := first_host(facts.node_list):
        yield f"@env-default MASTER_ADDR={host}"
    yield f"@env-default MASTER_PORT={facts.job % 4536 + 61000}"
    if facts.tasks:
        yield f"@env-default WORLD_SIZE={facts.tasks}"
    if facts.tasks > facts.nodes:
        yield "@env-default OMP_NUM_THREADS=1"
    yield "@env-end"


def first_host(host_list: str) -> str:
    """The first host of a Slurm host list: ``n1,n2`` -> ``n1``, ``gpu[07-09,12]x`` -> ``gpu07x``
    (each range's first number as written, its zeros kept)."""
    host, position = "", 0
    while position < len(host_list) and host_list[position] != ",":
        if host_list[position] == "[":
            end = host_list.find("]", position)
            end = len(host_list) if end < 0 else end
            ranges = host_list[position + 1:end]
            host += ranges[:len(ranges) - len(ranges.lstrip("0123456789"))]
            position = end + 1
        else:
            host += host_list[position]
            position += 1
    return host
