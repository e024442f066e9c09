"""Added latency of the Slurm plugin: median wall time of ``srun true`` against
``srun --container-name=X true`` (container already made) and ``srun --container-image=IMAGE true``,
on the test cluster of ``testbed/slurm.py``, as the test user. Each srun is a step of one
allocation (as in a batch script), so that job allocation and epilogs are not part of the figures.

    python -m benchmarks.srun_bench IMAGE.sqsh [RUNS]     (as root; starts and stops the cluster)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.compiled import compile_hydria
from testbed import slurm
from testbed.users import User

USER = User.lookup("hydria-test")


def run(argv: list[str], **env: str) -> str:
    """``argv`` as the test user; its standard error (where salloc says which job it made)."""
    return subprocess.run(argv, user=USER.uid, group=USER.gid, extra_groups=[], cwd="/tmp", check=True, text=True,
                          env=USER.environment({"SLURM_CONF": str(slurm.CONF), **env}), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE).stderr


def timed(argv: list[str], job: str) -> float:
    began = time.perf_counter()
    run(argv, SLURM_JOB_ID=job)
    return time.perf_counter() - began


def main() -> int:
    image, runs = Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 20
    compile_hydria()
    slurm.start(str(Path(sys.executable).parent / "hydria"))
    try:
        job = run(["salloc", "--no-shell"]).split("Granted job allocation ")[1].split()[0]
        timed(["srun", f"--container-image={image}", "--container-name=bench", "true"], job)  # make it
        cases = {"srun true": ["srun", "true"],
                 "srun --container-name=bench true": ["srun", "--container-name=bench", "true"],
                 "srun --container-image=IMAGE true": ["srun", f"--container-image={image}", "true"]}
        medians = {name: statistics.median(timed(argv, job) for _ in range(runs)) for name, argv in cases.items()}
    finally:
        slurm.stop()
    base = medians["srun true"]
    for name, value in medians.items():
        print(f"{name:40} {value * 1000:7.1f} ms  (+{(value - base) * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
