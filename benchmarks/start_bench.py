"""Start benchmark: median wall time of starting ``true`` in a container, as an ordinary user.

* hydria start IMAGE.sqsh true (squashfuse + overlay) and hydria start NAME true (created), with
  the kernel's overlay and with fuse-overlayfs (HYDRIA_NATIVE_OVERLAYFS=n, as before Linux 5.11
  and for a data path on NFS);
* hydria create of the image (no unpack) and create --unpack;
* Charliecloud's ch-run from a directory and from the same image file, when installed.

Run as root (it switches to the test user): python benchmarks/start_bench.py IMAGE.sqsh [--runs 20]
Make IMAGE.sqsh with hydria import, e.g. of the Debian test image or the 2 GB benchmark image.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compiled import compile_hydria
from testbed.users import TEST_USERS, User, run_as

HYDRIA = str(Path(sys.executable).parent / "hydria")


def median_ms(user: User, argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = run_as(user, argv, env=env)
        times.append((time.perf_counter() - started) * 1000)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {result.stderr}")
    return statistics.median(times)


@contextmanager
def start_setup(source: Path, prefix: str) -> Iterator[tuple[User, Path, Path, dict[str, str]]]:
    """What a start benchmark begins with: hydria compiled, the test user, a folder they may
    write, ``source`` copied there (readable by them), and the settings of their starts."""
    compile_hydria()
    user = User.lookup(TEST_USERS[0])
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        work.chmod(0o777)
        image = work / "image.sqsh"
        shutil.copyfile(source, image)
        image.chmod(0o644)
        yield user, work, image, {"HYDRIA_DATA_PATH": str(work / "data"), "HYDRIA_RUNTIME_PATH": str(work / "run")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("image", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    with start_setup(options.image, "hydria-start-bench-") as (user, work, image, env):
        rows = [("hydria start IMAGE true", median_ms(user, [HYDRIA, "start", str(image), "true"], env, options.runs))]
        started = time.perf_counter()
        run_as(user, [HYDRIA, "create", "-n", "bench", str(image)], env=env, check=True)
        rows.append(("hydria create (no unpack)", (time.perf_counter() - started) * 1000))
        rows.append(("hydria start NAME true", median_ms(user, [HYDRIA, "start", "bench", "true"], env, options.runs)))
        fuse = {**env, "HYDRIA_NATIVE_OVERLAYFS": "n"}
        rows.append(("  the same with fuse-overlayfs", median_ms(user, [HYDRIA, "start", "bench", "true"], fuse,
                                                                 options.runs)))
        rows.append(("hydria start IMAGE true, fuse-overlayfs",
                     median_ms(user, [HYDRIA, "start", str(image), "true"], fuse, options.runs)))
        started = time.perf_counter()
        run_as(user, [HYDRIA, "create", "--unpack", "-n", "flat", str(image)], env=env, check=True)
        rows.append(("hydria create --unpack", (time.perf_counter() - started) * 1000))
        rows.append(("hydria start NAME true (unpacked)",
                     median_ms(user, [HYDRIA, "start", "flat", "true"], env, options.runs)))
        if shutil.which("ch-run"):
            rootfs = work / "data" / "flat" / "rootfs"
            rows.append(("ch-run DIR true", median_ms(user, ["ch-run", str(rootfs), "--", "true"], env, options.runs)))
            # The same file as hydria start IMAGE true, mounted by ch-run's own squashfuse.
            ch_env = {**env, "USER": user.name}
            rows.append(("ch-run IMAGE true", median_ms(user, ["ch-run", str(image), "--", "true"], ch_env, options.runs)))
        print(f"{'operation':<36}{'ms':>10}   (start: median of {options.runs})")
        for name, value in rows:
            print(f"{name:<36}{value:>10.1f}")
        if rows[-1][0] == "ch-run IMAGE true":
            print(f"hydria start IMAGE true / ch-run IMAGE true: {rows[0][1] / rows[-1][1]:.2f}x (the goal: 2x)")
        subprocess.run(["rm", "-rf", str(work / "data")], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
