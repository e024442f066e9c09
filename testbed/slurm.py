"""A real single-node Slurm cluster on this machine, with hydria's plugin loaded.

``python -m testbed slurm start|stop`` (as root). Everything lives under ``/run/hydria-slurm``:
slurm.conf (used through ``SLURM_CONF``, so the machine's own /etc/slurm is left alone), the
plugstack with ``spank_hydria.so`` compiled by ``hydria slurm install-plugin``, state, spool and
logs. munged runs as the munge user; slurmctld and slurmd as root, with no cgroup plugins.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.users import run_as
from testbed.workspace import Workspace

ROOT = Path("/run/hydria-slurm")
CONF = ROOT / "slurm.conf"
NODE = "hydria-node"


def slurm_conf(root: Path = ROOT) -> str:
    cpus = os.cpu_count() or 1
    host = os.uname().nodename.split(".")[0]
    return f"""\
ClusterName=hydria-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
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
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start(hydria: str, plugin_options: list[str] | None = None) -> None:
    """Start munged, slurmctld and slurmd (stopping an earlier cluster first) and wait until the
    node takes jobs. Raises RuntimeError with the daemons' logs when it does not come up."""
    stop()
    for sub in ("state", "spool"):  # a fresh cluster: no recovered jobs, no drained node
        shutil.rmtree(ROOT / sub, ignore_errors=True)
    for sub in ("state", "spool", "plugstack.conf.d", "lib"):
        (ROOT / sub).mkdir(parents=True, exist_ok=True)
    CONF.write_text(slurm_conf())
    (ROOT / "plugstack.conf").write_text(f"include {ROOT}/plugstack.conf.d/*.conf\n")
    subprocess.run([hydria, "slurm", "install-plugin", f"--plugin-dir={ROOT}/lib",
                    f"--plugstack-dir={ROOT}/plugstack.conf.d", *(plugin_options or [])],
                   check=True, stdout=subprocess.DEVNULL)
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
    env = {**os.environ, "SLURM_CONF": str(CONF)}
    subprocess.run(["slurmctld", "-f", str(CONF)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(CONF), "-N", NODE], check=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=env, check=False).stdout
        if state.strip() in ("idle", "mix", "alloc"):
            return
        time.sleep(0.5)
    logs = "".join((ROOT / f"{d}.log").read_text()[-2000:] for d in ("slurmctld", "slurmd") if (ROOT / f"{d}.log").exists())
    raise RuntimeError(f"the Slurm test cluster did not come up:\n{logs}")


def stop() -> None:
    """Stop the daemons of an earlier start, if any."""
    for pidfile in (ROOT / "slurmd.pid", ROOT / "slurmctld.pid", Path("/run/munge/munged.pid")):
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


class Submitter:
    """Slurm's client commands (srun, sbatch, salloc, ...) as a workspace's user, from its ``out``
    folder, against the test cluster, with hydria's settings pointing into the workspace."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def run(self, program: str, *args: str, input: str | None = None,
            **env: str) -> subprocess.CompletedProcess[str]:
        return run_as(self.workspace.user, [program, *args], cwd=self.workspace.out, timeout=120, input=input,
                      env=self.workspace.env(SLURM_CONF=str(CONF), **env))

    def ok(self, program: str, *args: str, input: str | None = None, **env: str) -> str:
        result = self.run(program, *args, input=input, **env)
        assert result.returncode == 0, result.stderr
        return result.stdout


if __name__ == "__main__":
    if sys.argv[1:2] == ["start"]:
        start(sys.argv[2] if len(sys.argv) > 2 else str(Path(sys.executable).parent / "hydria"))
    else:
        stop()
