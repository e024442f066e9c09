"""What the C shim passes to ``hydria slurm ACTION``, and how errors go back to it.

The shim's command line: ``--config KEY=VALUE`` (plugstack arguments), ``--step=JOB.STEP``,
``--job=JOB``, ``--tasks=N`` and ``--nodes=N`` (the step's, as Slurm counts them),
``--batch-script=PATH``, ``--export``, ``--no-attach``, ``--marks-fd=N``, ``--store-trees=PATH``
and ``--store-reads-fd=N`` (the node's trees of the store's images, mounted for the step, and the
pipe to their keeper: container/store_trees.py), then every ``--container-*`` occurrence.
Errors print as ``hydria: MESSAGE`` (the user sees them in srun's terminal) and exit 1.

``start`` tells the shim what it resolved with marked lines (``@log``, ``@workdir``, ``@cleanup``,
the tasks' environment plan of hydria.slurm.task_env, ...) on a descriptor of their own,
``--marks-fd`` (``hydria store import`` takes one too, for its ``@log`` lines, when the shim runs
it for a step): never on stdout or stderr, which the image's
entrypoint writes to as well (an image that printed ``@workdir /x`` moved every task). The
descriptor is not inherited by anything ``start`` runs, the container least of all.
"""

from __future__ import annotations

import os
import sys

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


class ShimArguments:
    """The shim's arguments to the Python side, as :func:`split` sorts them."""

    step: str = ""
    job: str = ""
    batch_script: str | None = None
    export: bool = False
    attach: bool = True  # False: the running container to join ended meanwhile; start another
    marks_fd: int | None = None
    store_fill: bool = True  # False: the store's owner tried to import the image already
    tasks: int = 0  # the step's tasks on all its nodes (0: not told)
    nodes: int = 0  # the step's nodes (0: not told)
    store_trees: str | None = None  # the node's trees of the store's images, mounted for the step
    store_reads_fd: int | None = None  # the pipe to the store's keeper of those trees

    def __init__(self) -> None:
        self.config: list[str] = []  # the plugstack arguments
        self.options: list[str] = []  # the --container-* occurrences, in order


def split(args: Sequence[str]) -> ShimArguments:
    parsed = ShimArguments()
    remaining = list(args)
    while remaining:
        arg = remaining.pop(0)
        if arg == "--config" and remaining:
            parsed.config.append(remaining.pop(0))
        elif arg.startswith("--step="):
            parsed.step = arg.removeprefix("--step=")
        elif arg.startswith("--job="):
            parsed.job = arg.removeprefix("--job=")
        elif arg.startswith("--batch-script="):
            parsed.batch_script = arg.removeprefix("--batch-script=")
        elif arg == "--export":
            parsed.export = True
        elif arg == "--no-attach":
            parsed.attach = False
        elif arg == "--no-store-fill":
            parsed.store_fill = False
        elif arg.startswith("--marks-fd="):
            parsed.marks_fd = _number(arg, "a descriptor number")
        elif arg.startswith("--store-trees="):
            parsed.store_trees = arg.removeprefix("--store-trees=")
        elif arg.startswith("--store-reads-fd="):
            parsed.store_reads_fd = _number(arg, "a descriptor number")
        elif arg.startswith(("--tasks=", "--nodes=")):
            setattr(parsed, arg[2:].partition("=")[0], _number(arg, "a count"))
        else:
            parsed.options.append(arg)
    return parsed


def _number(arg: str, meaning: str) -> int:
    name, _, number = arg.partition("=")
    if not is_number(number):
        raise HydriaError(f"{name}: expected {meaning}, got {number!r}")
    return int(number)


LOG_MARK = "@log "  # a line for the user's terminal: the shim passes it to slurm_spank_log


class MarkChannel:
    """Where ``start`` (and the store's import) sends marks: the shim's descriptor, closed to
    every program it runs."""

    def __init__(self, fd: int | None) -> None:
        """Raises HydriaError without a usable descriptor (``start`` is run by the shim only)."""
        if fd is None:
            raise HydriaError("--marks-fd is missing: hydria slurm start is run by the Slurm plugin only")
        try:
            os.set_inheritable(fd, False)
        except OSError as e:
            raise HydriaError(f"--marks-fd={fd}: {e.strerror}") from None
        self._fd = fd

    def send(self, mark: str) -> None:
        """One mark (one line: a line break in it would start another mark)."""
        os.write(self._fd, (" ".join(mark.splitlines()) + "\n").encode(errors="surrogateescape"))

    def log(self, message: str) -> None:
        """A line for the user's terminal, as pyxis's log lines (``hydria: MESSAGE``)."""
        self.send(f"{LOG_MARK}hydria: {message}")


def report(error: HydriaError) -> int:
    print(f"hydria: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"hydria: hint: {error.hint}", file=sys.stderr)
    return 1


def validate(args: Sequence[str]) -> int:
    """``hydria slurm validate``: the submit side's check of the options (and plugstack arguments)."""
    from hydria.slurm.plugin_config import parse_plugin_config
    from hydria.slurm.step_options import parse

    shim = split(args)
    try:
        parse_plugin_config(shim.config)
        parsed = parse(shim.options, os.environ)
    except HydriaError as e:
        return report(e)
    for warning in parsed.warnings:
        print(f"hydria: {warning}", file=sys.stderr)
    return 0
