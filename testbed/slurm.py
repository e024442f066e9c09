"""A real Slurm cluster on this machine, with hydria's plugin loaded: one node, or several.

``python -m testbed.slurm start [NODES]|stop`` (as root). Everything lives under
``/run/hydria-slurm``: slurm.conf (used through ``SLURM_CONF``, so the machine's own /etc/slurm is
left alone), the plugstack with ``spank_hydria.so`` compiled by ``hydria slurm install-plugin``,
state, spool and logs. munged runs as the munge user; slurmctld and slurmd as root, with no cgroup
plugins.

One node: slurmd on 127.0.0.1. Several nodes: each slurmd runs on a node of testbed/nodes.py
(network, UTS and mount namespaces: its own address, host name and /etc/hosts) in a PID namespace
(a node sees only its own processes), with a Slurm ``TmpFS`` of its own. The file system is
shared, as on a cluster with a shared home; what a node keeps locally belongs in paths that name
``$HOSTNAME``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed import nodes
from testbed.users import SLURM_PREFIX, run_as
from testbed.workspace import Workspace

ROOT = Path("/run/hydria-slurm")
# hydria's site settings on the test cluster, where an administrator puts them: a job cannot set
# them (docs/slurm.md), so a test names its workspace's folders with the job's HYDRIA_TESTBED_*
# variables (testbed/workspace.py), which this file reads, as a site's file may read any variable.
SITE_CONF = Path("/etc/hydria/hydria.conf.d/50-hydria-testbed.conf")
CONF = ROOT / "slurm.conf"
NODE = "hydria-node"
# Run on each node of a several-node cluster: NODE_TMP TMPFS CONF NAME MUNGE_RUN
# A node's PID 1 is the shell, which collects every orphan while it waits, as a node's init does
# (slurmd, which collects only its own children, would keep them as zombies). Each node has a
# munged of its own (its socket in MUNGE_RUN, bound over /run/munge), as a cluster's nodes do: a
# credential decoded by one munged is a replay to it the second time, which Slurm 23.11 refuses
# when a slurmd forwards a launch to the next node.
NODE_SCRIPT = ('mount --bind "$1" "$2" && mount --bind "$5" /run/munge && '
               'runuser -u munge -- munged --log-file="$5/munged.log" --seed-file="$5/munged.seed" && '
               '{ slurmd -D -f "$3" -N "$4" & wait $!; }')


def node_names(count: int) -> list[str]:
    return [NODE] if count == 1 else nodes.names(count)


def node_address(count: int, index: int) -> str:
    return "127.0.0.1" if count == 1 else nodes.address(index)


def node_tmp(name: str) -> Path:
    """What a node of a several-node cluster sees as its ``TmpFS`` (``ROOT/node-tmp``): Slurm's
    PMIx plugin makes a directory there named after the step, which nodes must not share."""
    return ROOT / "tmp" / name


def slurm_conf(root: Path = ROOT, count: int = 1) -> str:
    cpus = os.cpu_count() or 1
    host = os.uname().nodename.split(".")[0]
    controller = "127.0.0.1" if count == 1 else nodes.HEAD_ADDRESS
    node_lines = "".join(
        f"NodeName={name} NodeHostname={host if count == 1 else name} NodeAddr={node_address(count, i)} "
        f"CPUs={cpus} State=UNKNOWN\n" for i, name in enumerate(node_names(count)))
    return f"""\
ClusterName=hydria-test
SlurmctldHost={host}({controller})
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
LaunchParameters=use_interactive_step
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig={root}/plugstack.conf
{"" if count == 1 else f"TmpFS={root}/node-tmp"}
{node_lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start(hydria: str, plugin_options: list[str] | None = None, count: int = 1) -> None:
    """Start munged, slurmctld and one slurmd per node (stopping an earlier cluster first) and
    wait until every node takes jobs. Raises RuntimeError with the daemons' logs when they do not
    come up."""
    stop()
    for sub in ("state", "spool", "tmp"):  # a fresh cluster: no recovered jobs, no drained node
        shutil.rmtree(ROOT / sub, ignore_errors=True)
    for log in ROOT.glob("slurm*.log"):  # what this cluster logs alone (slurmd_logs)
        log.unlink()
    for sub in ("state", "spool", "plugstack.conf.d", "lib", "node-tmp",
                *(f"tmp/{name}" for name in node_names(count))):
        (ROOT / sub).mkdir(parents=True, exist_ok=True)
    CONF.write_text(slurm_conf(count=count))
    SITE_CONF.parent.mkdir(parents=True, exist_ok=True)
    SITE_CONF.write_text(site_conf(count))
    (ROOT / "plugstack.conf").write_text(f"include {ROOT}/plugstack.conf.d/*.conf\n")
    include = [f"--include={SLURM_PREFIX}/include"] if SLURM_PREFIX else []
    subprocess.run([hydria, "slurm", "install-plugin", f"--plugin-dir={ROOT}/lib",
                    f"--plugstack-dir={ROOT}/plugstack.conf.d", *include, *(plugin_options or [])],
                   check=True, stdout=subprocess.DEVNULL)
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
    env = {**os.environ, "SLURM_CONF": str(CONF)}
    subprocess.run(["slurmctld", "-f", str(CONF)], check=True, env=env)
    if count == 1:
        subprocess.run(["slurmd", "-f", str(CONF), "-N", NODE], check=True, env=env)
    else:
        nodes.create(count)
        for name in node_names(count):
            munge_run = ROOT / "munge" / name
            munge_run.mkdir(parents=True, exist_ok=True)
            shutil.chown(munge_run, "munge", "munge")
            # In the foreground (-D) under PID 1 of the node's PID namespace: a daemonising
            # slurmd would end the namespace with the parent it leaves.
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", NODE_SCRIPT, "-",
                    str(node_tmp(name)), str(ROOT / "node-tmp"), str(CONF), name, str(munge_run)]
            subprocess.Popen(nodes.in_node(name, argv), env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=env,
                                check=False).stdout.split()
        if len(states) == count and all(state in ("idle", "mix", "alloc") for state in states):
            return
        time.sleep(0.5)
    logs = "".join(path.read_text()[-2000:] for path in sorted(ROOT.glob("slurm*.log")))
    raise RuntimeError(f"the Slurm test cluster did not come up:\n{logs}")


def site_conf(count: int) -> str:
    """The test cluster's site settings; with several nodes, each keeps its named containers in a
    folder of its own (``$HOSTNAME``), as a site with node-local data paths does, unless a job sets
    ``HYDRIA_TESTBED_NODE_FOLDER`` (empty: one data path that the nodes share)."""
    per_node = "${HYDRIA_TESTBED_NODE_FOLDER-/${HOSTNAME}}" if count > 1 else ""
    return f"""\
HYDRIA_ALLOW_HTTP y
HYDRIA_ALLOW_SUPERUSER ${{HYDRIA_TESTBED_SUPERUSER:-n}}
HYDRIA_CACHE_PATH ${{HYDRIA_TESTBED_CACHE:-$XDG_CACHE_HOME/hydria}}
HYDRIA_CONFIG_PATH ${{HYDRIA_TESTBED_CONFIG:-$XDG_CONFIG_HOME/hydria}}
HYDRIA_DATA_PATH ${{HYDRIA_TESTBED_DATA:-$XDG_DATA_HOME/hydria}}{per_node}
HYDRIA_TEMP_PATH ${{HYDRIA_TESTBED_TEMP:-/tmp}}
HYDRIA_READ_CACHE_PATH ${{HYDRIA_TESTBED_READ_CACHE:-/var/tmp/hydria-unpacked-$UID}}
HYDRIA_CDI_SPEC_DIRS ${{HYDRIA_TESTBED_CDI:-/etc/cdi:/var/run/cdi}}
"""


def on_node(name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` as root in the mount namespace of node ``name`` of a several-node cluster (that of
    its slurmd, where its steps run)."""
    found = subprocess.run(["pgrep", "-f", "-x", f"slurmd -D -f {CONF} -N {name}"], capture_output=True,
                           text=True, check=False).stdout.split()
    if not found:
        raise RuntimeError(f"no slurmd of node {name} is running")
    return subprocess.run(["nsenter", f"--mount=/proc/{found[0]}/ns/mnt", *argv], capture_output=True, text=True,
                          check=False)


def stop() -> None:
    """Stop the daemons of an earlier start, if any, remove its network namespaces and its site
    settings."""
    SITE_CONF.unlink(missing_ok=True)
    # Not slurmd's pid files: a node's slurmd writes the pid it has in its own PID namespace (1).
    for pidfile in (ROOT / "slurmctld.pid", Path("/run/munge/munged.pid")):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            continue
    for name in ("slurmd", "slurmctld"):
        subprocess.run(["pkill", "-x", name], check=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-x", "-f", "slurmd .*|slurmctld .*"],
                                                         stdout=subprocess.DEVNULL, check=False).returncode == 0:
        time.sleep(0.2)
    nodes.destroy()


def slurmd_logs() -> str:
    """What every node's slurmd has logged so far (the plugin's errors among it)."""
    return "".join(path.read_text(errors="replace") for path in sorted(ROOT.glob("slurmd-*.log")))


class Submitter:
    """Slurm's client commands (srun, sbatch, salloc, ...) as a workspace's user, from its ``out``
    folder, against the test cluster, with hydria's settings pointing into the workspace."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def run(self, program: str, *args: str, input: str | None = None,
            **env: str) -> subprocess.CompletedProcess[str]:
        environment = {key: value for key, value in self.workspace.env().items()
                       if key != "HYDRIA_SYSCONF_PATH"}  # a job reads the site's (SITE_CONF)
        environment.update(SLURM_CONF=str(CONF), **env)
        return run_as(self.workspace.user, [program, *args], cwd=self.workspace.out, timeout=120, input=input,
                      env=environment)

    def ok(self, program: str, *args: str, input: str | None = None, **env: str) -> str:
        result = self.run(program, *args, input=input, **env)
        assert result.returncode == 0, result.stderr
        return result.stdout


if __name__ == "__main__":
    if sys.argv[1:2] == ["start"]:
        start(str(Path(sys.executable).parent / "hydria"), count=int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    else:
        stop()
