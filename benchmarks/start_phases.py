"""Where a start's time goes: ``hydria start IMAGE true`` cut into its phases by the system calls
that bound them, as an ordinary user (docs/performance.md, "Where a start's time goes").

strace follows the start with a seccomp filter (``--seccomp-bpf``), so that only the calls it
records (execve, clone, unshare, mount, pivot_root, exit_group) stop the process; every other call
runs at full speed and a start costs about what it costs without strace (the script prints both).
The phases, each ending at the first call that starts the next:

* python: from hydria's execve to its first fork: the interpreter, the imports, the settings and
  the image's check;
* namespaces and image: the reader's fork, the user and mount namespaces, the runtime tmpfs and
  the mount of the image (until the overlay's mount returns: it waits for the reader's answer);
* mounts and hooks: the binds and files of the container (/proc, /sys, /dev, /etc/hosts, ... the
  cgroup) and the hooks' edits between them (passwd, localtime);
* switch: pivot_root, the last namespaces, up to the execve of the image's ``/etc/rc``;
* rc: ``/etc/rc`` (enroot's: the image's environment and entry point), up to the program's execve;
* program: ``true`` itself, until hydria's process exits.

Run as root (it switches to the test user): python benchmarks/start_phases.py IMAGE.sqsh [--runs 20]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.start_bench import start_setup
from testbed.users import run_as

HYDRIA = str(Path(sys.executable).parent / "hydria")
CALLS = "execve,clone,clone3,unshare,mount,pivot_root,exit_group"
LINE = re.compile(r"^(\d+) (\d+\.\d+) (\w+)\((.*)")
PHASES = ("python", "namespaces and image", "mounts and hooks", "switch", "rc", "program")


def phases(trace: str) -> dict[str, float]:
    """The phases of one start's strace (-f -ttt -T), in milliseconds."""
    calls = [(int(m[1]), float(m[2]), m[3], m[4]) for m in map(LINE.match, trace.splitlines()) if m]
    hydria = calls[0][0]
    own = [(t, name, rest) for pid, t, name, rest in calls if pid == hydria]

    def first(name: str, after: float = 0.0, text: str = "") -> float:
        return next(t for t, call, rest in own if call == name and t >= after and text in rest)
    start = own[0][0]
    forked = first("clone")
    overlay = first("mount", forked, '"overlay"')
    after_overlay = next(t for t, call, rest in own if call == "mount" and t > overlay)
    pivot = first("pivot_root", overlay)
    rc = first("execve", pivot, "/etc/rc")
    program = [t for t, call, rest in own if call == "execve" and t > rc and "= 0" in rest][-1]
    end = own[-1][0]
    bounds = (start, forked, after_overlay, pivot, rc, program, end)
    return {phase: (bounds[i + 1] - bounds[i]) * 1000 for i, phase in enumerate(PHASES)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("image", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("start_phases.py needs strace (apt-get install strace)")
    with start_setup(options.image, "hydria-start-phases-") as (user, work, image, env):
        traced: dict[str, list[float]] = {phase: [] for phase in PHASES}
        totals, plain = [], []
        for run in range(options.runs):
            trace = work / f"trace.{run}"
            started = time.perf_counter()
            run_as(user, [HYDRIA, "start", str(image), "true"], env=env, check=True)
            plain.append((time.perf_counter() - started) * 1000)
            run_as(user, ["strace", "--seccomp-bpf", "-f", "-ttt", "-T", "-e", f"trace={CALLS}", "-o", str(trace),
                          HYDRIA, "start", str(image), "true"], env=env, check=True)
            for phase, ms in phases(trace.read_text()).items():
                traced[phase].append(ms)
            totals.append(sum(traced[phase][-1] for phase in PHASES))
        interpreter = []
        for _ in range(options.runs):
            started = time.perf_counter()
            run_as(user, [sys.executable, "-S", "-c", "pass"], env=env, check=True)
            interpreter.append((time.perf_counter() - started) * 1000)
    print(f"hydria start IMAGE true, median of {options.runs} ({options.image.name})")
    print(f"{'phase':<22} {'ms':>7}")
    for phase in PHASES:
        print(f"{phase:<22} {statistics.median(traced[phase]):7.1f}")
    print(f"{'sum (under strace)':<22} {statistics.median(totals):7.1f}")
    print(f"{'whole start, no strace':<22} {statistics.median(plain):7.1f}  (through su, as start_bench.py)")
    print(f"{'python -S -c pass':<22} {statistics.median(interpreter):7.1f}  (through su: the interpreter alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
