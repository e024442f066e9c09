"""``hydria slurm ACTION``: the Python side of the Slurm plugin.

* ``validate OPTIONS...`` (srun, sbatch, salloc): check the ``--container-*`` options;
* ``start --step=JOB.STEP --marks-fd=N [--batch-script=PATH] OPTIONS...`` (slurmstepd, as the
  user): set up the step's container; the batch step's script is bound into it at the same path;
  what it resolved goes to the shim on descriptor N (hydria.slurm.shim);
* ``cleanup --step=JOB.STEP [--export] OPTIONS...`` (slurmstepd, as the user): save the container
  (--container-save, when every task started: ``--export``), remove what the step left;
* ``epilog --job=JOB`` (slurmd's job epilog, as the user; container_scope=job): remove the job's
  named containers;
* ``install-plugin [--plugin-dir D] [--plugstack-dir D] [--include D] [KEY=VALUE...]`` (admin).

Errors print as ``hydria: MESSAGE`` and exit 1, as pyxis's do in the user's terminal.
"""

from __future__ import annotations

import os
import sys

from hydria.config import Settings
from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from hydria.container.store_trees import StoreTrees
    from hydria.slurm.shim import ShimArguments

ACTIONS = ("validate", "start", "cleanup", "epilog", "install-plugin")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    import argparse

    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="options of the action")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.slurm.shim import report

    try:
        return _dispatch(options.action, list(options.args), settings)
    except HydriaError as e:
        return report(e)


def run_action(action: str, args: list[str]) -> int:
    """``start``, ``cleanup`` or ``epilog`` without the command-line parser (main.py)."""
    from hydria.cli.logsetup import setup_logging
    from hydria.slurm.shim import report

    setup_logging()
    try:
        settings, ignored = _job_settings()
        return _dispatch(action, args, settings, ignored)
    except HydriaError as e:
        return report(e)


def _job_settings() -> tuple[Settings, list[str]]:
    """A step's settings: those that protect the site (plain HTTP, paths, ...) come from the
    administrator's files alone. Also the site settings that the job's environment or the user's
    hydria.conf would have changed."""
    from hydria.config import HYDRIA_PREFIX, SITE_SETTINGS, job_environment, load_settings
    from hydria.errors import ConfigError

    environment, removed = job_environment(os.environ)
    settings = load_settings(environment, site_only=SITE_SETTINGS)
    try:
        wanted: Settings | None = load_settings(os.environ)
    except ConfigError:
        wanted = None  # what the job asked for is not even valid: it is ignored all the same
    for name in removed:
        del os.environ[name]
    if wanted is None:
        return settings, removed
    return settings, [HYDRIA_PREFIX + name for name in sorted(SITE_SETTINGS)
                      if getattr(wanted, name.lower()) != getattr(settings, name.lower())]


def _dispatch(action: str, args: list[str], settings: Settings, ignored: Sequence[str] = ()) -> int:
    """``ignored``: site settings the job wanted to change (the user hears of them when the step fails)."""
    from hydria.slurm import shim, step_options
    from hydria.slurm import step as step_lifecycle
    from hydria.slurm.plugin_config import parse_plugin_config
    from hydria.slurm.task_env import StepFacts

    if action == "install-plugin":
        return _install(args)
    if action == "validate":
        return shim.validate(args)
    arguments = shim.split(args)
    config = parse_plugin_config(arguments.config)
    if action == "epilog":
        if not is_number(arguments.job):
            raise HydriaError(f"--job: expected a job id, got {arguments.job!r}")
        step_lifecycle.remove_job_containers(arguments.job, settings)
        return 0
    parsed = step_options.parse(arguments.options, os.environ)
    step = _step(arguments.step)
    if action == "cleanup":
        saved = step_lifecycle.cleanup(parsed, step, settings, os.environ, config.container_scope, arguments.export,
                                       plugin=config)
        if saved is not None:
            name = step_lifecycle.container_name(parsed, step, config.container_scope)
            print(f"hydria: exported container {name} to {saved}", file=sys.stderr)
        return 0
    marks = shim.MarkChannel(arguments.marks_fd)  # before anything runs that could inherit it
    store_trees = _store_trees(arguments)
    for name in ignored:  # shown with the step's errors only: the job's output stays the program's, as with pyxis
        print(f"hydria: ignoring {name} from the job's environment or your hydria.conf: for Slurm jobs only "
              "the administrator sets it", file=sys.stderr)
    if parsed.entrypoint is None:
        parsed.entrypoint = config.execute_entrypoint
    if not parsed.devices and config.container_device:
        parsed.devices = step_options.device_names(config.container_device, "container_device")
    for warning in parsed.warnings:
        print(f"hydria: {warning}", file=sys.stderr)
    if not parsed.enabled:
        return step_lifecycle.DISABLED_STATUS
    if not arguments.store_fill:
        config = config._replace(store_owner="")
    facts = StepFacts(int(step.partition(".")[0]), arguments.tasks, arguments.nodes,
                      os.environ.get("SLURM_STEP_NODELIST", ""))
    try:
        pid = step_lifecycle.start(parsed, step, settings, os.environ, marks, facts, scope=config.container_scope,
                                   batch_script=arguments.batch_script, attach=arguments.attach, plugin=config,
                                   store_trees=store_trees)
    except step_lifecycle.StoreImportRequested:
        return step_lifecycle.STORE_STATUS
    marks.send(f"@attach {pid}")  # the running container the shim's tasks join
    return step_lifecycle.ATTACH_STATUS


def _store_trees(arguments: ShimArguments) -> StoreTrees | None:
    """The node's trees of the store's images that the shim mounted for the step, with the pipe
    to their keeper (closed to every program the start runs), or None."""
    from hydria.container.store_trees import StoreTrees

    if arguments.store_reads_fd is None:
        return None
    try:
        os.set_inheritable(arguments.store_reads_fd, False)
    except OSError as e:
        raise HydriaError(f"--store-reads-fd={arguments.store_reads_fd}: {e.strerror}") from None
    if not arguments.store_trees:
        os.close(arguments.store_reads_fd)
        return None
    return StoreTrees(arguments.store_trees, arguments.store_reads_fd)


def _step(step: str) -> str:
    job, dot, number = step.partition(".")
    if not (is_number(job) and dot and (is_number(number) or number in ("batch", "interactive"))):
        raise HydriaError(f"--step: expected JOBID.STEPID (STEPID a number, batch or interactive), got {step!r}")
    return step


def _install(args: list[str]) -> int:
    from pathlib import Path

    from hydria.cli.commands import ArgumentParser
    from hydria.slurm.install import install_plugin

    parser = ArgumentParser(prog="hydria slurm install-plugin")
    parser.add_argument("--plugin-dir", type=Path, default=Path("/usr/local/lib/slurm"))
    parser.add_argument("--plugstack-dir", type=Path, default=Path("/etc/slurm/plugstack.conf.d"))
    parser.add_argument("--include", type=Path, default=Path("/usr/include"))
    parser.add_argument("config", nargs="*", metavar="KEY=VALUE", help="plugin options, as pyxis's")
    options = parser.parse_args(args)
    snippet = install_plugin(options.plugin_dir, options.plugstack_dir, options.include, options.config)
    print(f"hydria: wrote {snippet}; plugstack.conf must include it (include {options.plugstack_dir}/*.conf)")
    return 0
