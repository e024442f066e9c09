"""Read benchmark: how fast programs in a container read its image, against the same files in a
plain host directory (the physical limit) and the peers, with the page cache dropped before each run.

Workloads (as the test user): Python imports (numpy, scipy.linalg, pandas), tar of 40,000 small
files, 640 MiB of large files, and 8 processes importing at once (8 ranks of a job). Readers:

* host directory: the tree itself (``unshare -r chroot``), the limit;
* hydria start IMAGE.sqsh and hydria start NAME (created, not unpacked): "first", the first start
  of the image on a node, read through hydria's reader; "later", a later start on the node, which
  reads what earlier starts read from the tree that hydria kept behind them (the read cache; the
  benchmark runs each workload once beforehand) and the rest through the reader;
* hydria start LAYERED: the same tree as a layered image of three layer images (the system, the
  small files, the large files), stacked by the overlay, first and later;
* the same image served by the high-level ``squashfuse`` (``HYDRIA_FAST_READER=n``), as before;
* Charliecloud's ``ch-run`` on the same squashfs (it links squashfuse's library), when installed;
* enroot's extracted container, when a real enroot is installed.

An image store entry is an image file mounted in place: its reads are those of IMAGE.sqsh.
The workload's wall time timed inside the reader (bash's $EPOCHREALTIME: the reads without the
start), the whole command's wall time, and CPU time, the FUSE daemons' included (this process is
their subreaper and reaps them); the median of interleaved rounds; ratios to the host directory,
paired by round (the median of each round's ratio).

Run as root: python benchmarks/read_bench.py [--rounds 3] [--workdir /var/tmp/hydria-read-bench]
[--squash-options "-comp lz4"] (the image's compression; default: hydria's setting in effect)
[--torch] (adds PyTorch's CPU wheel to the tree, with pip, and 8 processes importing torch at once)
[--only WORDS] (only the workloads whose name holds WORDS, e.g. "small files" or torch)
The tree (Debian bookworm with python3-numpy, -scipy, -pandas from Debian's packages, plus the
generated files) and its image are built once into the work directory (about 2 GB).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compiled import compile_hydria
from benchmarks.import_bench import enroot_environment, real_enroot
from hydria.config import load_settings
from hydria.container.read_cache import UNPACK_AFTER
from hydria.image.squash.squashfs import Tar2Sqfs, repack, squash_plan
from hydria.runtime.layered import layered_text
from testbed.users import TEST_USERS, User

HYDRIA = str(Path(sys.executable).parent / "hydria")
PACKAGES = "python3,python3-numpy,python3-scipy,python3-pandas"
IMPORTS = "import numpy, scipy.linalg, pandas"


def at_once(command: str, count: int = 8) -> str:
    """``count`` copies of ``command`` at once; fails when any of them fails."""
    return (f"pids=; for i in $(seq {count}); do {command} & pids=\"$pids $!\"; done; "
            "for pid in $pids; do wait $pid || exit 1; done")


WORKLOADS = {
    "Python imports": f"python3 -c '{IMPORTS}'",
    "tar of 40,000 small files": "tar -cf - /bench/small | wc -c",
    "640 MiB of large files": "cat /bench/large/* | wc -c",
    "8 processes importing": at_once(f"python3 -c '{IMPORTS}'"),
}
TORCH_WORKLOAD = ("8 processes importing torch", at_once("python3 -c 'import torch'"))
TORCH = "torch==2.13.0"  # the CPU wheel this machine has on disk
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # on Debian bookworm's python3's path
PR_SET_CHILD_SUBREAPER = 36


def build_tree(tree: Path) -> None:
    """Debian with the scientific Python stack, 40,000 small text files in 400 folders, ten
    64 MiB files of random bytes."""
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(tree)],
                   check=True)
    shutil.rmtree(tree / "dev")  # device nodes: every reader mounts the host's /dev
    (tree / "dev").mkdir()
    words = [os.urandom(4).hex() for _ in range(5000)]
    chooser = random.Random(1)
    for number in range(400):
        folder = tree / "bench" / "small" / f"d{number:03d}"
        folder.mkdir(parents=True)
        for item in range(100):
            count = chooser.randint(10, 220)
            (folder / f"f{item:03d}.txt").write_text(" ".join(chooser.choice(words) for _ in range(count)))
    (tree / "bench" / "large").mkdir()
    for number in range(10):
        with open(tree / "bench" / "large" / f"blob{number}", "wb") as handle:
            handle.writelines(os.urandom(1 << 20) for _ in range(64))


def squash(tree: Path, image: Path, squash_options: str, members: tuple[str, ...] = (".",),
           leave_out: tuple[str, ...] = ()) -> None:
    """The tree (its ``members`` but ``leave_out``) as hydria's import writes an image: tar2sqfs
    with these squash options (and mksquashfs's repack where they store parts uncompressed)."""
    plan = squash_plan(squash_options, os.cpu_count() or 1)
    quick = image.with_name(image.name + ".quick")
    writer = Tar2Sqfs(quick if plan.mksquashfs else image, plan.tar2sqfs)
    excluded = [f"--exclude={path}" for path in ("./dev/*", *leave_out)]
    tar = subprocess.Popen(["tar", "-C", str(tree), *excluded, "-cf", "-", *members], stdout=writer.stdin)
    writer.stdin.close()  # tar holds the pipe now
    if tar.wait() != 0:
        writer.abort()
        raise SystemExit("tar of the tree failed")
    writer.finish()
    if plan.mksquashfs:
        pseudo = image.with_name(image.name + ".pseudo")
        repack(str(quick), str(pseudo), str(image), plan.mksquashfs)
        quick.unlink()
        pseudo.unlink()
    image.chmod(0o644)


def layered(tree: Path, image: Path, squash_options: str) -> Path:
    """The same tree as a layered image (docs/import.md) of three layer images beside ``image``:
    the system, the small files, the large files."""
    layers = {"system": ((".",), ("./bench",)), "small": (("./bench/small",), ()), "large": (("./bench/large",), ())}
    names = []
    for name, (members, leave_out) in layers.items():
        names.append(f"{image.stem}.{name}.sqsh")
        if not (image.parent / names[-1]).exists():
            squash(tree, image.parent / names[-1], squash_options, members, leave_out)
    path = image.with_suffix(".layers")
    path.write_bytes(layered_text(names))
    path.chmod(0o644)
    return path


def add_torch(tree: Path) -> None:
    """PyTorch and what it needs, installed by this Python's pip (the same 3.11 as the tree's)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(tree / SITE_PACKAGES), TORCH],
                   check=True)


def prepare(workdir: Path, squash_options: str, torch: bool) -> tuple[Path, Path]:
    tree = workdir / ("tree-torch" if torch else "tree")
    image = workdir / f"image{'-torch' if torch else ''}{'-'.join(squash_options.split()).replace('--', '-')}.sqsh"
    plain = workdir / "tree"
    if not (tree / "bench" / "large" / "blob9").exists():
        shutil.rmtree(tree, ignore_errors=True)
        if torch and (plain / "bench" / "large" / "blob9").exists():
            subprocess.run(["cp", "-a", str(plain), str(tree)], check=True)
        else:
            build_tree(tree)
    if torch and not (tree / SITE_PACKAGES / "torch").is_dir():
        add_torch(tree)
    if not image.exists():
        squash(tree, image, squash_options)
    workdir.chmod(0o755)
    return tree, image


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def reap() -> None:
    """Wait for the daemons that outlived their container's program (they are ours to reap)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def measure(user: User, argv: list[str], env: dict[str, str], script: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system of everything it started) of one cold run, and
    the wall seconds of the workload alone, timed inside (no start)."""
    timed = f'set -o pipefail; s=$EPOCHREALTIME; {{ {script}; }} || exit; e=$EPOCHREALTIME; echo "workload $s $e" >&2'
    drop_caches()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([*argv, "/bin/bash", "-c", timed], user=user.uid, group=user.gid, extra_groups=[],
                            env=user.environment(env), cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, check=False)
    reap()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    _, begin, end = result.stderr.strip().splitlines()[-1].split()
    return wall, cpu, float(end) - float(begin)


def paired_ratio(runs: list[float], limits: list[float]) -> float:
    """The median of each round's ratio to the host directory's run of the same round: a slow
    moment of the machine, which moves both, cancels out (a ratio of medians moved ~5% between
    runs on a 2-CPU machine)."""
    return statistics.median(run / limit for run, limit in zip(runs, limits))


def keep_on_this_node(user: User, target: str, env: dict[str, str], scripts: list[str]) -> None:
    """Run each of ``scripts`` in a start of ``target`` that stays until the read cache keeps what
    it read (docs/performance.md), as the earlier starts of a job on a node do: later starts then
    read those files from the tree, and the rest through the reader."""
    folder = Path(env["HYDRIA_READ_CACHE_PATH"])

    def kept() -> int:
        return sum(int(path.read_text()) for path in folder.glob("*/size") if "." not in path.parent.name)
    for script in scripts:
        container = subprocess.Popen([HYDRIA, "start", target, "/bin/bash", "-c", f"{script} > /dev/null; exec sleep 600"],
                                     user=user.uid, group=user.gid, extra_groups=[], env=user.environment(env), cwd="/")
        time.sleep(UNPACK_AFTER)
        size, deadline = -1, time.monotonic() + 600
        while time.monotonic() < deadline:  # until a few seconds pass without a batch
            time.sleep(3)
            if kept() == size:
                break
            size = kept()
        container.terminate()
        container.wait()
        reap()
    if not kept():
        raise SystemExit(f"hydria kept nothing of {target} in {folder}")


def readers(tree: Path, image: Path, layers: Path, env: dict[str, str],
            enroot_env: dict[str, str] | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each reader: the command that runs a program inside it, and its environment (enroot's
    with ``enroot_env``, where a real enroot is installed)."""
    host = ["unshare", "-rm", "sh", "-c", 'mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"', str(tree)]
    first = {**env, "HYDRIA_READ_CACHE_SIZE": "0"}  # a first start on the node: the reader serves
    found = {"host directory (limit)": (host, env),
             "hydria start IMAGE.sqsh, later": ([HYDRIA, "start", str(image)], env),
             "hydria start NAME, later": ([HYDRIA, "start", "readbench"], env),
             "hydria start LAYERED, later": ([HYDRIA, "start", str(layers)], env),
             "hydria start IMAGE.sqsh, first": ([HYDRIA, "start", str(image)], first),
             "hydria start NAME, first": ([HYDRIA, "start", "readbench"], first),
             "hydria start LAYERED, first": ([HYDRIA, "start", str(layers)], first),
             "squashfuse (before)": ([HYDRIA, "start", str(image)], {**first, "HYDRIA_FAST_READER": "n"})}
    if shutil.which("ch-run"):
        found["ch-run IMAGE.sqsh"] = (["ch-run", str(image), "--"], env)
    enroot = real_enroot()
    if enroot and enroot_env is not None:
        found["enroot start NAME (extracted)"] = ([enroot, "start", "readbench"], enroot_env)
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/hydria-read-bench"))
    parser.add_argument("--squash-options", help="mksquashfs options of the image (default: HYDRIA_SQUASH_OPTIONS)")
    parser.add_argument("--torch", action="store_true", help="add PyTorch and 8 processes importing it")
    parser.add_argument("--only", metavar="WORDS", help="only the workloads whose name holds WORDS, e.g. torch")
    options = parser.parse_args()
    squash_options = options.squash_options or load_settings().squash_options
    options.workdir.mkdir(parents=True, exist_ok=True)
    compile_hydria()
    tree, image = prepare(options.workdir, squash_options, options.torch)
    workloads = dict([*WORKLOADS.items(), *([TORCH_WORKLOAD] if options.torch else [])])
    workloads = {name: script for name, script in workloads.items() if (options.only or "") in name}
    if not workloads:
        raise SystemExit(f"no workload's name holds {options.only!r}: {', '.join(WORKLOADS)}, {TORCH_WORKLOAD[0]}")
    user = User.lookup(TEST_USERS[0])
    state = options.workdir / f"state-{user.name}"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    shutil.chown(state, user.uid, user.gid)
    env = {"HYDRIA_DATA_PATH": str(state / "data"), "HYDRIA_CACHE_PATH": str(state / "cache"),
           "HYDRIA_READ_CACHE_PATH": str(state / "unpacked")}
    subprocess.run([HYDRIA, "create", "-n", "readbench", str(image)], user=user.uid, group=user.gid,
                   extra_groups=[], env=user.environment(env), check=True, cwd="/")
    enroot, enroot_env = real_enroot(), None
    if enroot:  # enroot's extracted container, as pyxis creates one
        (state / "enroot").mkdir()
        shutil.chown(state / "enroot", user.uid, user.gid)
        enroot_env = user.environment(enroot_environment(enroot, state / "enroot", user.environment()["PATH"]))
        subprocess.run([enroot, "create", "-n", "readbench", str(image)], user=user.uid, group=user.gid,
                       extra_groups=[], env=enroot_env, check=True, cwd="/", capture_output=True)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("cannot become the daemons' subreaper")
    layers = layered(tree, image, squash_options)
    for target in (str(image), "readbench", str(layers)):  # the named container's image.sqsh is a file of its own
        keep_on_this_node(user, target, env, list(workloads.values()))
    table = readers(tree, image, layers, env, enroot_env)
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    names = list(table)
    for turn in range(options.rounds):  # interleaved: a slow moment of the machine hits every reader alike
        rotated = names[turn % len(names):] + names[:turn % len(names)]  # and none always runs after another
        for workload, script in workloads.items():
            for name in rotated:
                prefix, reader_env = table[name]
                samples.setdefault((workload, name), []).append(measure(user, prefix, reader_env, script))
    print(f"cold page cache; median of {options.rounds} rounds; ratios: the median of each round's ratio to the "
          "host directory's run in that round; 'later': a later start on the node, which reads what earlier "
          "starts read from the read cache, 'first': the first, read through hydria's reader")
    print(f"image: {image} ({image.stat().st_size / 2**20:.0f} MiB, {squash_options}); LAYERED: {layers}")
    print(f"\n  {'':<36}{'workload, timed inside':>24}{'whole command (start too)':>28}{'CPU s':>8}")
    for workload in workloads:
        print(f"{workload}")
        host = samples[(workload, "host directory (limit)")]
        for name in table:
            runs = samples[(workload, name)]
            wall, cpu = statistics.median(w for w, _, _ in runs), statistics.median(c for _, c, _ in runs)
            inside = statistics.median(i for _, _, i in runs)
            inside_ratio = paired_ratio([i for _, _, i in runs], [i for _, _, i in host])
            wall_ratio = paired_ratio([w for w, _, _ in runs], [w for w, _, _ in host])
            print(f"  {name:<36}{inside:>13.2f} ({inside_ratio:4.2f}x){wall:>17.2f} ({wall_ratio:4.2f}x){cpu:>8.2f}")
    shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
