"""Multi-node without Slurm: ``hydria start [OPTIONS] IMAGE mpirun --hostfile FILE ...``.

When the container's command is an MPI launcher (mpirun, mpiexec, orterun, prterun, oshrun),
Open MPI's launch agent (``OMPI_MCA_plm_rsh_agent``, and ``PRTE_MCA_plm_ssh_agent`` for Open MPI
5) is set to a small script that hydria mounts into the container at ``/.hydria-launch``. Open MPI
runs ``AGENT HOST COMMAND...`` to start its daemon on each other node; the script runs
``ssh HOST`` with the image's ssh client and, there, ``hydria start`` with this start's options,
``HYDRIA_*`` settings and image, and the daemon inside (through the agent again, so that the
daemon, which Open MPI hands the agent's path, finds it there too). So every rank runs in the same container
on every node, for any user, without a hand-written hook.

Needs: hydria at the same path on every node, the image (or named container) there at the same
path, an ssh client in the image and keys that let the user in (the user's ``~/.ssh`` is mounted
read-only into the container for it). A launch agent the user chose is kept.
"""

from __future__ import annotations

import os

from hydria.paths import hydria_command
from hydria.record import TYPE_CHECKING
from hydria.runtime.edits import Edits, StartContext
from hydria.runtime.fstab import MountEntry

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "oshrun"})
AGENT = "/.hydria-launch"  # in the container
AGENT_VARIABLES = ("OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent")
PASSED_SETTINGS = ("HYDRIA_", "ENROOT_")
AGENT_SCRIPT = """#!/bin/sh
# hydria's Open MPI launch agent: Open MPI runs "AGENT HOST COMMAND..."; this runs COMMAND on HOST
# in the same container, which hydria starts there with the options of this start and this agent
# as its program ("AGENT --daemon COMMAND"), so that the daemon finds the agent there too.
if [ "$1" = --daemon ]; then
    exec sh -c "$2"
fi
host=$1
shift
remote={prefix}
command=$(printf '%s' "$*" | sed "s/'/'\\\\\\\\''/g")
exec ssh -x -o BatchMode=yes -l {login} "$host" "$remote {agent} --daemon '$command'"
"""


def is_launcher(command: Sequence[str]) -> bool:
    """An MPI launcher, or the agent starting a launcher's daemon on another node."""
    return bool(command) and (os.path.basename(command[0]) in LAUNCHERS or command[0] == AGENT)


def remote_start(start_arguments: Sequence[str], target: str, environment: Mapping[str, str]) -> str:
    """The shell command that starts the same container on another node, to which the daemon's
    command is appended: the ``HYDRIA_*`` settings in effect, then ``hydria start`` with the
    same options and target (an image file made absolute)."""
    import shlex  # here: its import (re) would cost every start

    settings = [f"{name}={value}" for name, value in sorted(environment.items())
                if name.startswith(PASSED_SETTINGS) and value]
    if os.path.isfile(target):
        target = os.path.abspath(target)
    words = ["env", *settings] if settings else []
    words += [*hydria_command(), "start", *start_arguments, target]
    return shlex.join(words)


def prepare(remote: str, area: str, login: str, host_home: str,
            inner_home: str) -> tuple[dict[str, str], list[MountEntry]]:
    """Write the agent for ``remote`` into ``area``; returns the variables that select it and the
    mounts that bring it (and the user's ~/.ssh) into the container. ``login`` is the user's
    name on the host (inside, with --root, the client would log in as root)."""
    import shlex

    agent = f"{area}/launch-agent"
    with open(agent, "w") as handle:
        handle.write(AGENT_SCRIPT.format(prefix=shlex.quote(remote), login=shlex.quote(login), agent=AGENT))
    os.chmod(agent, 0o755)
    mounts = [MountEntry(agent, AGENT, "none", ("x-create=file", "bind", "ro", "nosuid", "nodev"), origin="launch")]
    if os.path.isdir(f"{host_home}/.ssh"):
        mounts.append(MountEntry(f"{host_home}/.ssh", f"{inner_home}/.ssh", "none",
                                 ("x-create=dir", "bind", "ro", "nosuid", "nodev"), origin="launch"))
    return dict.fromkeys(AGENT_VARIABLES, AGENT), mounts


def edits(context: StartContext, remote: str) -> Edits:
    """The agent that starts ``remote`` (the same container) on the launcher's other nodes; an
    agent the user chose (``OMPI_MCA_plm_rsh_agent`` and the like, in the container) is kept."""
    user = context.user
    environment, mounts = prepare(remote, context.area, user.pw_name, user.pw_dir,
                                  "/root" if context.settings.remap_root else user.pw_dir)
    return Edits(tuple((name, value) for name, value in environment.items() if name not in context.container),
                 tuple(mounts))
