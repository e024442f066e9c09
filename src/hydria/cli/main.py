"""``hydria`` entry point.

The Slurm plugin's actions take short ways, as every step waits for them: ``hydria slurm validate``
(srun, sbatch and salloc, before anything is submitted) loads neither argparse nor logging nor the
settings, and ``start``/``cleanup``/``epilog`` (slurmstepd, slurmd) skip argparse. Every other
command goes through the command line of :mod:`hydria.cli.commands`.
"""

from __future__ import annotations

import sys

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one hydria command and return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] == ["slurm", "validate"]:
        from hydria.slurm.shim import validate

        return validate(args[2:])
    if args[:1] == ["start"]:
        from hydria.cli.quickstart import run as quick_start

        status = quick_start(args[1:])
        if status is not None:
            return status
    if args[:1] == ["slurm"] and args[1:2] in (["start"], ["cleanup"], ["epilog"]):
        from hydria.cli.slurm import run_action

        return run_action(args[1], args[2:])
    from hydria.cli.commands import run

    return run(args)
