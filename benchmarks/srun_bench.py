"""Added latency of the Slurm plugin: median wall time of ``srun true`` against
``srun --container-name=X true`` (container already made) and ``srun --container-image=IMAGE true``,
on the test cluster of ``testbed/slurm.py``, as the test user.

    python -m benchmarks.srun_bench IMAGE.sqsh [RUNS]     (as root; starts and stops the cluster)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from testbed import slurm
from testbed.users import User

USER = User.lookup("hydria-test")


def timed(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, user=USER.uid, group=USER.gid, extra_groups=[], cwd="/tmp", check=True,
                   env=USER.environment({"SLURM_CONF": str(slurm.CONF)}), stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> int:
    image, runs = Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 20
    slurm.start(str(Path(sys.executable).parent / "hydria"))
    try:
        timed(["srun", f"--container-image={image}", "--container-name=bench", "true"])  # make the container
        cases = {"srun true": ["srun", "true"],
                 "srun --container-name=bench true": ["srun", "--container-name=bench", "true"],
                 "srun --container-image=IMAGE true": ["srun", f"--container-image={image}", "true"]}
        medians = {name: statistics.median(timed(argv) for _ in range(runs)) for name, argv in cases.items()}
    finally:
        slurm.stop()
    base = medians["srun true"]
    for name, value in medians.items():
        print(f"{name:40} {value * 1000:7.1f} ms  (+{(value - base) * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
