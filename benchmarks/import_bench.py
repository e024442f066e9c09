"""Import benchmark: hydria against its peers on the same images, side by side in one run.

Images: a ~2 GB image in 7 layers (compressible and incompressible data, one zstd layer), built
once by this harness and cached, and the Debian test image. Each is served by a local registry.
Tools, each with the same squash options:

* hydria import, cold (empty cache), warm (the image kept in the cache: a hardlink) and warm
  with the layers only (``HYDRIA_CACHE_IMAGES=0``: merged and squashed again from cached blobs);
* the plain pipeline: skopeo copy + umoci unpack + mksquashfs;
* podman pull, and Charliecloud ch-image pull, when installed (they do not make a squashfs).

Prints wall time, CPU time and peak RSS per tool and the ratio of each to hydria cold; with
``--rounds N`` every tool runs N times, in turn, and its median run is printed with the spread
(single runs on a small VM vary by 20-40%).
Run as root: python benchmarks/import_bench.py [--size-mb 2048] [--only debian] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.oci import Image, make_layer, push
from testbed.recipes import DEFAULT_CACHE, get_image
from testbed.registry import Registry
from testbed.tarbuild import LayerTar

SQUASH_OPTIONS = "-comp zstd -Xcompression-level 1"  # hydria's default; --squash-options to compare others
HYDRIA = str(Path(sys.executable).parent / "hydria")


@dataclass
class Measure:
    tool: str
    wall: float
    cpu: float
    rss_mb: float
    ok: bool
    fastest: float = 0.0  # of several rounds
    slowest: float = 0.0


def real_enroot() -> str | None:
    """``enroot`` on PATH, where it is NVIDIA's enroot, not hydria under that name."""
    found = shutil.which("enroot")
    return found if found and "hydria" not in os.path.realpath(found) else None


def enroot_environment(enroot: str, home: Path, path: str | None = None) -> dict[str, str]:
    """enroot's settings for a run whose files all go under ``home``, which must exist: plain HTTP
    to the test registry, and its helpers (``enroot-mount`` ...) beside it on PATH."""
    folders = {"ENROOT_CACHE_PATH": "cache", "ENROOT_DATA_PATH": "data", "ENROOT_RUNTIME_PATH": "run",
               "ENROOT_CONFIG_PATH": "config", "ENROOT_TEMP_PATH": "tmp"}
    for folder in folders.values():
        (home / folder).mkdir(exist_ok=True)
        shutil.chown(home / folder, home.stat().st_uid, home.stat().st_gid)
    return {"PATH": f"{Path(enroot).parent}:{path or os.environ['PATH']}", "HOME": str(home),
            "ENROOT_ALLOW_HTTP": "yes", **{name: str(home / folder) for name, folder in folders.items()}}


PREFAULT_GIB = 8.0  # more than any tool's new page cache (the plain pipeline writes about 6 GB)


def prefault(gib: float) -> None:
    """Write ``gib`` GiB of memory and free it again.

    On a VM that hands free memory back to its host (virtio-balloon free page reporting, as on
    the 2-core VMs measured here), a page the guest touches again costs a host fault: writing
    1 GiB of new page cache took 2.5 CPU-seconds instead of 0.2, and which tool pays depends on
    how long ago memory was freed. Touching memory right before each run gives every run the
    same, backed, free memory (the host reclaims it only slowly)."""
    available = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemAvailable:"))) << 10
    size = max(0, min(int(gib * (1 << 30)), available - (2 << 30)))
    block = b"\1" * size
    del block


def timed(tool: str, commands: list[list[str]], env: dict[str, str] | None = None,
          prefault_gib: float = PREFAULT_GIB) -> Measure:
    """Run commands one after another under GNU time; sum wall and CPU, keep the peak RSS.

    Each starts after a sync (the write-back of what the previous step wrote, gigabytes for a push
    or an import, would take CPU and disk from the next one) and, unless ``--no-prefault``, on
    freshly touched memory (:func:`prefault`)."""
    wall = cpu = rss = 0.0
    for argv in commands:
        os.sync()
        prefault(prefault_gib)
        with tempfile.NamedTemporaryFile("r") as report:
            result = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%e %U %S %M", *argv],
                                    env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False)
            fields = report.read().split()[-4:]
        if result.returncode != 0:
            print(f"  {tool}: {' '.join(argv[:3])} failed: {result.stderr.strip()[-300:]}", file=sys.stderr)
            return Measure(tool, 0, 0, 0, False)
        wall += float(fields[0])
        cpu += float(fields[1]) + float(fields[2])
        rss = max(rss, int(fields[3]) / 1024)
    return Measure(tool, wall, cpu, rss, True)


def big_image(size_mb: int, workdir: Path, zstd: bool = True) -> Image:
    """7 layers: text-like and random data in turn, layer 6 zstd-compressed (gzip without zstd)."""
    cache = DEFAULT_CACHE / f"bench-{size_mb}"
    layers = []
    per_layer = size_mb * (1 << 20) // 7
    rng = random.Random(42)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(2, 12)))
             for _ in range(5000)]
    cache.mkdir(parents=True, exist_ok=True)
    for index in range(7):
        tar_path = cache / f"layer{index}.tar"
        if not tar_path.exists():
            partial = tar_path.with_suffix(".partial")
            with LayerTar(partial) as layer:
                layer.directory(f"data{index}")
                written, number = 0, 0
                while written < per_layer:
                    size = min(rng.choice([4 << 10, 64 << 10, 1 << 20, 16 << 20]), per_layer - written)
                    if index % 2 == 0:
                        data = rng.randbytes(size)
                    else:
                        data = b" ".join(rng.choices(words, k=size // 6 + 1))[:size]
                    layer.file(f"data{index}/f{number:05d}", data)
                    written += size
                    number += 1
            partial.rename(tar_path)
        layers.append(make_layer(tar_path, workdir, "zstd" if index == 5 and zstd else "gzip"))
    return Image(layers, {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]})


def bench_image(name: str, image: Image, registry: Registry, workdir: Path, peers: bool,
                peer_image: Image | None = None, squash: str = SQUASH_OPTIONS,
                prefault_gib: float = PREFAULT_GIB, rounds: int = 1) -> list[Measure]:
    """``peer_image``: the same content for peers that cannot read zstd layers (umoci 0.4).
    Every tool runs ``rounds`` times, in turn; each tool's median round is reported."""
    push([image], registry.address, f"bench/{name}", "latest", workdir)
    push([peer_image or image], registry.address, f"bench/{name}-peers", "latest", workdir)
    measures = [bench_round(name, registry, workdir, peers, squash, prefault_gib) for _ in range(rounds)]
    return [median(list(runs)) for runs in zip(*measures, strict=True)]


def median(runs: list[Measure]) -> Measure:
    """The run of median wall time, with the spread of all runs."""
    ok = sorted((run for run in runs if run.ok), key=lambda run: run.wall)
    if len(ok) < len(runs):
        return Measure(runs[0].tool, 0, 0, 0, False)
    middle = ok[len(ok) // 2]
    return Measure(middle.tool, middle.wall, middle.cpu, middle.rss_mb, True, ok[0].wall, ok[-1].wall)


def bench_round(name: str, registry: Registry, workdir: Path, peers: bool, squash: str,
                prefault_gib: float) -> list[Measure]:
    def timed_here(tool: str, commands: list[list[str]], env: dict[str, str] | None = None) -> Measure:
        return timed(tool, commands, env, prefault_gib)

    uri = f"docker://{registry.address}#bench/{name}:latest"
    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    cache = out / "cache"
    env = {"HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(cache), "HYDRIA_SQUASH_OPTIONS": squash}
    results = [timed_here("hydria cold", [[HYDRIA, "import", "-q", "-o", str(out / "cold.sqsh"), uri]], env),
               timed_here("hydria warm", [[HYDRIA, "import", "-q", "-o", str(out / "warm.sqsh"), uri]], env),
               timed_here("hydria warm, layers only", [[HYDRIA, "import", "-q", "-o", str(out / "layers.sqsh"), uri]],
                     {**env, "HYDRIA_CACHE_IMAGES": "0"})]
    if not peers:
        return results
    layout, bundle = out / "layout", out / "bundle"
    results.append(timed_here("skopeo+umoci+mksquashfs", [
        ["skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{registry.address}/bench/{name}-peers:latest",
         f"oci:{layout}:latest"],
        ["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)],
        ["mksquashfs", str(bundle / "rootfs"), str(out / "plain.sqsh"), "-no-progress", "-quiet",
         "-processors", str(os.cpu_count()), *squash.split()],
    ]))
    shutil.rmtree(bundle, ignore_errors=True)
    if shutil.which("podman"):
        storage = out / "podman"
        results.append(timed_here("podman pull", [[
            "podman", "--root", str(storage / "root"), "--runroot", str(storage / "run"), "pull", "-q",
            "--tls-verify=false", f"{registry.address}/bench/{name}:latest"]]))
        subprocess.run(["rm", "-rf", str(storage)], check=False)
    if shutil.which("ch-image"):
        storage = out / "ch"
        results.append(timed_here("ch-image pull", [[
            "/usr/bin/python3", shutil.which("ch-image") or "ch-image", "--storage", str(storage), "--tls-no-verify", "pull",
            f"{registry.address}/bench/{name}:latest"]], {"USER": "root"}))
        subprocess.run(["rm", "-rf", str(storage)], check=False)
    return results


def report(name: str, results: list[Measure]) -> None:
    base = next((r for r in results if r.tool == "hydria cold" and r.ok), None)
    spread = any(r.slowest > r.fastest for r in results)
    print(f"\n{name}")
    print(f"{'tool':<26}{'wall s':>9}{'cpu s':>9}{'peak RSS MiB':>14}{'wall / hydria cold':>20}"
          + (f"{'wall s of all rounds':>24}" if spread else ""))
    for r in results:
        if not r.ok:
            print(f"{r.tool:<26}{'failed':>9}")
            continue
        ratio = f"{r.wall / base.wall:.2f}x" if base else "-"
        rounds = f"{r.fastest:.1f} - {r.slowest:.1f}" if spread else ""
        print(f"{r.tool:<26}{r.wall:>9.1f}{r.cpu:>9.1f}{r.rss_mb:>14.0f}{ratio:>20}{rounds:>24}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--only", choices=["big", "debian"])
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--squash-options", default=SQUASH_OPTIONS, help="for hydria and mksquashfs alike")
    parser.add_argument("--no-prefault", action="store_true", help="do not touch memory before each run")
    parser.add_argument("--rounds", type=int, default=1, help="run every tool this many times, in turn; "
                                                               "report each one's median")
    options = parser.parse_args()
    prefault_gib = 0.0 if options.no_prefault else PREFAULT_GIB
    print(f"squash options: {options.squash_options}")
    with tempfile.TemporaryDirectory(prefix="hydria-bench-") as tmp:
        workdir = Path(tmp)
        with Registry(workdir / "registry") as registry:
            if options.only != "big":
                report("Debian test image (3 layers, 216 MB)",
                       bench_image("debian", get_image("debian", workdir), registry, workdir, not options.no_peers,
                                   squash=options.squash_options, prefault_gib=prefault_gib,
                                   rounds=options.rounds))
            if options.only != "debian":
                image = big_image(options.size_mb, workdir)
                report(f"{options.size_mb} MB image (7 layers, one zstd; all gzip for skopeo+umoci)",
                       bench_image("big", image, registry, workdir, not options.no_peers,
                                   big_image(options.size_mb, workdir, zstd=False), options.squash_options,
                                   prefault_gib, options.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
