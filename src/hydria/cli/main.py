"""``hydria`` entry point.

``hydria slurm validate`` runs in srun, sbatch and salloc before anything is submitted, so it takes a
short way that loads neither argparse nor logging nor the settings; every other command goes
through the command line of :mod:`hydria.cli.commands`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one hydria command and return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] == ["slurm", "validate"]:
        from hydria.slurm.shim import validate

        return validate(args[2:])
    from hydria.cli.commands import run

    return run(args)
