"""``hydria doctor [--json] [--image IMAGE] [--cluster [-- SRUN_ARGS...]]``: health checks."""

from __future__ import annotations

import argparse
import json

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for monitoring)")
    parser.add_argument("--image", help="also start this image (a file, or a URI for --cluster's step)")
    parser.add_argument("--cluster", action="store_true",
                        help="check every node of a Slurm step: srun --ntasks-per-node=1 SRUN_ARGS")
    parser.add_argument("srun_arguments", nargs="*", metavar="SRUN_ARGS",
                        help="with --cluster, after --: srun's options (-N4 -p gpu ...)")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria import doctor
    from hydria.errors import UsageError

    if options.srun_arguments and not options.cluster:
        raise UsageError("SRUN_ARGS are for --cluster", hint="hydria doctor --cluster -- -N2 -p PARTITION")
    if options.cluster:
        cluster = doctor.cluster_report(options.srun_arguments, options.image)
        print(json.dumps(cluster.to_json(), indent=1) if options.json else doctor.render_cluster(cluster))
        return 0 if cluster.ok else 1
    report = doctor.node_report(settings, options.image)
    print(report.dumps() if options.json else doctor.render(report))
    return 0 if report.ok else 1
