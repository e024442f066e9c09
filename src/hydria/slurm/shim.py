"""What the C shim passes to ``hydria slurm ACTION``, and how errors go back to it.

The shim's command line: ``--config KEY=VALUE`` (plugstack arguments), ``--step=JOB.STEP``,
``--job=JOB``, ``--batch-script=PATH``, ``--export``, ``--no-attach``, then every ``--container-*``
occurrence.
Errors print as ``hydria: MESSAGE`` (the user sees them in srun's terminal) and exit 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from hydria.errors import HydriaError


class ShimArguments:
    """The shim's arguments to the Python side, as :func:`split` sorts them."""

    step: str = ""
    job: str = ""
    batch_script: str | None = None
    export: bool = False
    attach: bool = True  # False: the running container to join ended meanwhile; start another

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
        else:
            parsed.options.append(arg)
    return parsed


def report(error: HydriaError) -> int:
    print(f"hydria: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"hydria: hint: {error.hint}", file=sys.stderr)
    return 1


def validate(args: Sequence[str]) -> int:
    """``hydria slurm validate``: the submit side's check of the options (and plugstack arguments)."""
    from hydria.slurm.options import parse
    from hydria.slurm.plugin_config import parse_plugin_config

    shim = split(args)
    try:
        parse_plugin_config(shim.config)
        parsed = parse(shim.options, os.environ)
    except HydriaError as e:
        return report(e)
    for warning in parsed.warnings:
        print(f"hydria: {warning}", file=sys.stderr)
    return 0
