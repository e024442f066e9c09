"""``hydria oci ACTION``: Slurm's native containers (``srun --container=BUNDLE``) through hydria.

* ``run --bundle DIR`` (oci.conf's ``RunTimeRun``, as the task): run the bundle's config.json;
* ``state|kill|delete --user NAME --job J --step S`` (``RunTimeQuery``, ``RunTimeKill``,
  ``RunTimeDelete``; slurmstepd runs them when the step ends): the state of the step's containers
  on this node as OCI's state JSON, SIGTERM to what still runs, SIGKILL to what is left;
* ``conf``: print the oci.conf that runs bundles with this installation (the administrator puts
  it beside slurm.conf);
* ``scrun-lua``: print the scrun.lua for Slurm's ``scrun`` (podman and docker submitting to
  Slurm) with hydria as the runtime, which goes beside it too.
"""

from __future__ import annotations

import json
import pwd
import signal
import sys
from importlib import resources

from hydria.errors import HydriaError, UsageError
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from hydria.oci.steps import Step

ACTIONS = ("run", "state", "kill", "delete", "conf", "scrun-lua")
OCI_VERSION = "1.0.2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--bundle", help="run: the bundle's folder (oci.conf's %%b)")
    parser.add_argument("--user", help="state, kill, delete: the step's user (%%u)")
    parser.add_argument("--job", help="state, kill, delete: the job's ID (%%j)")
    parser.add_argument("--step", help="state, kill, delete: the step's ID (%%s)")


def run(options: argparse.Namespace) -> int:
    if options.action == "conf":
        sys.stdout.write(oci_conf())
        return 0
    if options.action == "scrun-lua":
        sys.stdout.write(resources.files("hydria.oci").joinpath("scrun.lua").read_text())
        return 0
    if options.action == "run":
        if not options.bundle:
            raise UsageError("oci run needs --bundle DIR", hint="oci.conf: RunTimeRun=\"hydria oci run --bundle %b\"")
        from hydria.oci.run import run as run_bundle

        run_bundle(options.bundle)
        return 1  # run_bundle execs the container's program or raises
    from hydria.oci import steps

    step = _step(options)
    if options.action == "state":
        running = steps.processes(step)
        json.dump({"ociVersion": OCI_VERSION, "id": f"{step.job}.{step.step}",
                   "status": "running" if running else "stopped", "pid": running[0] if running else 0,
                   "bundle": options.bundle or ""}, sys.stdout)
        sys.stdout.write("\n")
    else:
        steps.signal_all(step, signal.SIGTERM if options.action == "kill" else signal.SIGKILL)
    return 0


def oci_conf() -> str:
    """The oci.conf for this installation: the template with hydria's own absolute command."""
    from hydria.paths import hydria_command

    template = resources.files("hydria.oci").joinpath("oci.conf").read_text()
    return template.replace("@HYDRIA@", " ".join(hydria_command()))


def _step(options: argparse.Namespace) -> Step:
    from hydria.oci.steps import Step

    if not (options.user and options.job and options.step):
        raise UsageError(f"oci {options.action} needs --user, --job and --step",
                         hint="oci.conf gives them: --user %u --job %j --step %s")
    try:
        uid = pwd.getpwnam(options.user).pw_uid
    except KeyError:
        raise HydriaError(f"no user {options.user} on this node") from None
    return Step(uid, options.job, options.step)
