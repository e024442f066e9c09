"""Lifecycle benchmark: what a step of an image's life costs against what changed or was read.

Rows (issue 38):

* **a first import**: the image's first version, nothing of it in the cache, merged against layered;
  and **the first task** (issue 58): that import, then the first ``start IMAGE true`` of it, beside
  the download of every blob at once: skopeo's onto the disk, as an import keeps the blobs, and
  the wire alone (curl of every blob at once into /dev/null).
* **a new version**: an image whose only new layer is 3 MB, imported after the version before it
  (its layers' blobs in the cache). hydria merged into one file (``hydria import -o``, every layer
  merged and squashed again) against a layered import (``HYDRIA_LAYERED_IMAGES``: what a Slurm
  step's import does, image/kept/layered_import.py), beside the limit: a cold import of an image of
  that one new layer (its download and squash).
* **a rebuild**: ``hydria build`` of a Dockerfile ``FROM`` the image whose last ``RUN`` changed,
  after a build of the version before (the base image and the unchanged steps in the caches).
  Written as one file (``-o``: every layer merged and squashed again) against a layered image
  (``-t``, the default: the changed step's layer squashed), beside the limit: the changed step's
  own time, as the build shows it (``#N DONE 0.1s``), and ``podman build`` (root, chroot
  isolation, its base image pulled by the first build) of the same two Dockerfiles.
* **a new version in the image store**: ``hydria store import`` of the new version after the
  version before, by the store's owner: one image file (``HYDRIA_LAYERED_IMAGES=n``) against a
  layered store (``=y``: docs/store.md), beside the same limit as the first row.
* **what a task leaves on the node**: a task of ``--task-s`` seconds (longer than the read cache's
  wait: container/read_cache.py) that reads the new layer's one file in the new version (a Slurm
  step's layered import), with the page cache dropped before it and a read cache of its own. What
  the node keeps afterwards (the read cache's folder, on disk) and what was read of the image's
  files (their pages in the page cache afterwards, ``fincore``), against the limit: the files the
  task read (that one and busybox, which runs its commands), and beside it the image's metadata
  (its squashfs tables, which every start and the unpack read) and the image's size (what was
  unpacked per user and node before).
* **a start** of the new version (``hydria start IMAGE true``, median of 20) and **a cold read**
  of all its data (``cat`` of every file after dropping the page cache), merged against layered.

Two shapes of image (``--shape``): ``test``, the import benchmark's 7 layers of text-like and
random data; ``ngc``, shaped like NGC's framework images: a dozen small layers (environment,
configuration), an OS layer of many small files, a layer of shared libraries of 2-64 MiB, one of
Python packages (many small files), and one layer of half the image in large files (a framework's
libraries, weights), the libraries compressible about 2x.

enroot, where a real enroot is on PATH, with its own defaults (``-comp lzo -noD``), as an ordinary
user like hydria: its import of the first version and of the new version (its cache keeps the
blobs; every layer is extracted and squashed again), a start and a cold read of the new version,
what ``enroot create`` (the container pyxis makes for a step) keeps on the node, and the rebuild
as enroot sites make one: ``podman build``, then ``enroot import podman://``. enroot reads the
same images from a repository of its own whose manifests are Docker's: its first request, a HEAD
without an Accept header, gets a 404 for an OCI manifest from the test registry (distribution
2.x), where the registries in the field answer it.

Run as root: python benchmarks/lifecycle_bench.py [--shape test|ngc] [--size-mb 2048] [--rounds 3]
[--rows import,store,rebuild,task] [--task-s 15]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_bench import (
    HYDRIA,
    PREFAULT_GIB,
    big_image,
    enroot_environment,
    prefault,
    real_enroot,
    timed,
)
from read_bench import drop_caches

from hydria.runtime.rootfs import image_layers
from testbed.oci import Image, kept_layer, make_layer, push
from testbed.recipes import DEFAULT_CACHE, get_image
from testbed.registry import Registry
from testbed.tarbuild import LayerTar
from testbed.users import TEST_USERS, User, live_processes

USER = User.lookup(TEST_USERS[0])  # every import and start as an ordinary user
AS_USER = ["setpriv", f"--reuid={USER.uid}", f"--regid={USER.gid}", "--clear-groups"]

NEW_LAYER_MB = 3
ENROOT_REPOSITORY = "bench/lifecycle-enroot"  # the same images, Docker's manifests (see above)
# What a cold read reads of each shape: every file of its layers but busybox's.
TEST_READS = "/data*/*"
NGC_READS = "/etc[0-9]*/* /os/* /libraries/* /python/* /framework/*"
# What a Slurm step's import does, from the command line: the image in place, as a layered image.
LAYERED_IMPORT = ("import sys; from pathlib import Path; from hydria.config import load_settings; "
                  "from hydria.image.importer import import_image; "
                  "print(import_image(sys.argv[1], load_settings(), output=sys.argv[2], in_place=True))")


def ngc_image(size_mb: int, workdir: Path) -> Image:
    """An image shaped like NGC's framework images (see the module's docstring), ``size_mb`` in
    all; its layer tars are kept in the test bed's cache for the next run."""
    cache = DEFAULT_CACHE / f"ngc2-{size_mb}"  # 2: compressible files that do not repeat one block
    cache.mkdir(parents=True, exist_ok=True)
    total = size_mb << 20
    rng = random.Random(7)
    # (name, share of the image, file sizes, compressible)
    plan = [*((f"etc{index}", 0.0001, (4 << 10, 64 << 10), True) for index in range(12)),
            ("os", 0.06, (4 << 10, 64 << 10), True),
            ("libraries", 0.25, (2 << 20, 64 << 20), True),
            ("python", 0.14, (4 << 10, 1 << 20), True),
            ("framework", 0.55, (64 << 20, 512 << 20), False)]
    layers = []
    for name, share, (smallest, largest), compressible in plan:
        tar_path = cache / f"{name}.tar"
        if not tar_path.exists():
            partial = tar_path.with_suffix(".partial")
            with LayerTar(partial) as layer:
                layer.directory(name)
                written, number, budget = 0, 0, max(int(total * share), smallest)
                while written < budget:
                    size = min(rng.randint(smallest, largest), budget - written)
                    layer.file(f"{name}/f{number:06d}", _filler(rng, size, compressible))
                    written += size
                    number += 1
            partial.rename(tar_path)
        layers.append(kept_layer(tar_path, workdir))
    return Image(layers, {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]})


def _filler(rng: random.Random, size: int, compressible: bool) -> bytes:
    """``size`` bytes: random, or each 4 KiB half random and half zeros (about 2x with gzip or
    zstd; no block repeats another, which either would find)."""
    if not compressible:  # in pieces: randbytes takes at most 256 MiB at once
        return b"".join(rng.randbytes(min(16 << 20, size - start)) for start in range(0, size, 16 << 20))
    zeros = bytes(2048)
    return b"".join(rng.randbytes(2048) + zeros for _ in range(size // 4096 + 1))[:size]


def new_layer(workdir: Path) -> Image:
    tar = workdir / "new.tar"
    with LayerTar(tar) as layer:
        layer.directory("update")
        layer.file("update/new", os.urandom(NEW_LAYER_MB << 20))
    return Image([make_layer(tar, workdir)], {"Cmd": ["/bin/sh"]})


def layered_s(uri: str, output: Path, env: dict[str, str]) -> tuple[Path, float]:
    """A Slurm step's import of ``uri``: the layered image, and the seconds it took."""
    os.sync()
    prefault(PREFAULT_GIB)  # as timed() does before each of the others
    began = time.perf_counter()
    done = subprocess.run([*AS_USER, sys.executable, "-c", LAYERED_IMPORT, uri, str(output)], env=env,
                          capture_output=True, text=True, check=True, cwd=output.parent)
    return Path(done.stdout.strip()), time.perf_counter() - began


def first_start_s(image: Path, env: dict[str, str]) -> float:
    """The seconds of the image's first ``start IMAGE true`` on the node, as the user."""
    started = timed("v1 start", [[*AS_USER, HYDRIA, "start", str(image), "true"]], env)
    assert started.ok
    return started.wall


def start_ms(start: list[str], env: dict[str, str], runs: int = 20) -> float:
    """The median milliseconds of ``start`` (a command that runs the rest of its line in the
    image) of ``true``, as the user."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run([*AS_USER, *start, "true"], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def cold_read_s(start: list[str], env: dict[str, str], reads: str) -> float:
    """A start (as in :func:`start_ms`) that reads the files ``reads`` (shell words) and the new
    layer's, cold."""
    drop_caches()
    began = time.perf_counter()
    subprocess.run([*AS_USER, *start, "sh", "-c", f"cat {reads} /update/* > /dev/null"],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - began


def rebuilt_dockerfile(registry: Registry, version: int) -> str:
    """The rebuild row's Dockerfile: the image, and a last RUN that each version changes."""
    return f"FROM {registry.address}/bench/lifecycle:v1\nRUN echo {version} > /version\n"


def rebuild_round(registry: Registry, workdir: Path, number: int, enroot: str | None = None) -> dict[str, float]:
    """The rebuild row: the second of two builds that differ in their last RUN, each way."""
    results = {}
    for kind, output in (("merged", ["-o", "app.sqsh"]), ("layered", ["-t", "app:1"])):
        home = workdir / f"rebuild-{kind}{number}"
        context = home / "context"
        context.mkdir(parents=True)
        env = {**os.environ, "HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(home / "cache"), "HOME": str(home),
               "HYDRIA_LAYERED_IMAGES": "y" if kind == "layered" else "n"}
        for version in (1, 2):
            (context / "Dockerfile").write_text(rebuilt_dockerfile(registry, version))
            for path in (home, context, context / "Dockerfile"):
                os.chown(path, USER.uid, USER.gid)
            prefault(PREFAULT_GIB)
            began = time.perf_counter()
            done = subprocess.run([*AS_USER, HYDRIA, "build", *output, str(context)], env=env, cwd=home,
                                  capture_output=True, text=True, check=False)
            wall = time.perf_counter() - began
            assert done.returncode == 0, done.stderr
        step = re.findall(r"^#\d+ DONE ([\d.]+)s$", done.stderr, re.MULTILINE)
        assert len(step) == 1, done.stderr  # the changed step ran, the rest was cached
        results[f"{kind} rebuild"], results["rebuild limit"] = wall, float(step[0])
        shutil.rmtree(home)
    if shutil.which("podman"):
        results.update(podman_rebuild(registry, workdir / f"rebuild-podman{number}", enroot))
    return results


def podman_rebuild(registry: Registry, home: Path, enroot: str | None) -> dict[str, float]:
    """podman's rebuild: the second of the same two builds (its base image pulled by the first),
    and with ``enroot``, enroot's: that build, then enroot's import of the image it made."""
    results = {}
    context = home / "context"
    context.mkdir(parents=True)
    tag = f"localhost/hydria-lifecycle-bench-{os.getpid()}"
    try:
        for version in (1, 2):
            (context / "Dockerfile").write_text(rebuilt_dockerfile(registry, version))
            prefault(PREFAULT_GIB)
            began = time.perf_counter()
            subprocess.run(["podman", "build", "--isolation=chroot", "--network=host", "--tls-verify=false", "-q",
                            "-t", f"{tag}:{version}", str(context)], capture_output=True, text=True, check=True)
            results["podman rebuild"] = time.perf_counter() - began
        if enroot:
            # enroot 4.1's podman:// import exits 1 after writing the image where `docker rm` fails
            # (its exit trap removes a Docker container, podman's import too): the image is checked.
            app = home / "app.sqsh"
            os.sync()
            prefault(PREFAULT_GIB)
            began = time.perf_counter()
            subprocess.run([enroot, "import", "-o", str(app), f"podman://{tag}:2"],
                           env={**os.environ, **enroot_environment(enroot, home)}, capture_output=True, check=False)
            results["enroot rebuild"] = results["podman rebuild"] + time.perf_counter() - began
            subprocess.run(["unsquashfs", "-s", str(app)], check=True, capture_output=True)  # mksquashfs finished it
    finally:
        subprocess.run(["podman", "rmi", "-f", f"{tag}:1", f"{tag}:2", f"{registry.address}/bench/lifecycle:v1"],
                       capture_output=True, check=False)
        subprocess.run(["podman", "image", "prune", "-f"], capture_output=True, check=False)
    return results


def user_home(home: Path, folder: str) -> Path:
    """``home`` with ``folder`` in it, both the benchmark user's."""
    (home / folder).mkdir(parents=True)
    for path in (home, home / folder):
        os.chown(path, USER.uid, USER.gid)
    return home


def user_env(home: Path, **settings: str) -> dict[str, str]:
    """The environment of the user's commands: their cache and home in ``home``."""
    return {**os.environ, "HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(home / "cache"), "HOME": str(home),
            **settings}


def one_round(registry: Registry, workdir: Path, number: int, reads: str = TEST_READS,
              enroot: str | None = None) -> dict[str, float]:
    uri = f"docker://{registry.address}#bench/lifecycle"
    results = {}
    for kind in ("merged", "layered"):
        home = user_home(workdir / f"{kind}{number}", "out")
        env = user_env(home, HYDRIA_DATA_PATH=str(home / "data"), HYDRIA_LAYERED_IMAGES="y", HYDRIA_READ_CACHE_SIZE="0")
        if kind == "merged":
            first = timed("v1", [[*AS_USER, HYDRIA, "import", "-q", "-o", str(home / "out/v1.sqsh"), f"{uri}:v1"]], env)
            assert first.ok
            first_start = first_start_s(home / "out/v1.sqsh", env)
            measure = timed("v2", [[*AS_USER, HYDRIA, "import", "-q", "-o", str(home / "out/v2.sqsh"), f"{uri}:v2"]], env)
            assert measure.ok
            results[f"{kind} import"], image = measure.wall, home / "out/v2.sqsh"
        else:
            first = timed("v1", [[*AS_USER, sys.executable, "-c", LAYERED_IMPORT, f"{uri}:v1",
                                  str(home / "out/v1.sqsh")]], env)
            assert first.ok
            kept = layered_s(f"{uri}:v1", home / "out/v1.sqsh", env)[0]  # its path: the import again finds it kept
            first_start = first_start_s(kept, env)
            image, results[f"{kind} import"] = layered_s(f"{uri}:v2", home / "out/v2.sqsh", env)
        results[f"{kind} first import"], results[f"{kind} first import cpu"] = first.wall, first.cpu
        results[f"{kind} first task"] = first.wall + first_start
        results[f"{kind} start ms"] = start_ms([HYDRIA, "start", str(image)], env)
        results[f"{kind} cold read"] = cold_read_s([HYDRIA, "start", str(image)], env, reads)
        shutil.rmtree(home)  # room for the next: three times the image's size each
    if enroot:
        results.update(enroot_round(enroot, registry, workdir, number, reads))
    results["limit"] = limit_s(registry, workdir, number)
    results["download"] = download_s(registry, workdir / f"download{number}")
    results["wire"] = wire_s(registry)
    return results


def enroot_round(enroot: str, registry: Registry, workdir: Path, number: int, reads: str) -> dict[str, float]:
    """enroot's side of the import row: the first version cold, the new version after it, a start
    and a cold read of the new version, and what ``enroot create`` of it keeps on the node."""
    home = user_home(workdir / f"enroot{number}", "out")
    env = {**os.environ, **enroot_environment(enroot, home)}
    uri = f"docker://{registry.address}#{ENROOT_REPOSITORY}"
    first = timed("enroot v1", [[*AS_USER, enroot, "import", "-o", str(home / "out/v1.sqsh"), f"{uri}:v1"]], env)
    assert first.ok
    first_start = timed("enroot v1 start", [[*AS_USER, enroot, "start", str(home / "out/v1.sqsh"), "true"]], env)
    assert first_start.ok
    measure = timed("enroot v2", [[*AS_USER, enroot, "import", "-o", str(home / "out/v2.sqsh"), f"{uri}:v2"]], env)
    assert measure.ok
    start = [enroot, "start", str(home / "out/v2.sqsh")]
    results = {"enroot import": measure.wall, "enroot first import": first.wall, "enroot first import cpu": first.cpu,
               "enroot first task": first.wall + first_start.wall,
               "enroot start ms": start_ms(start, env), "enroot cold read": cold_read_s(start, env, reads)}
    subprocess.run([*AS_USER, enroot, "create", "-n", "v2", str(home / "out/v2.sqsh")], env=env, check=True,
                   capture_output=True)
    results["enroot create kept"] = disk_usage(home / "data")
    shutil.rmtree(home)
    return results


def download_s(registry: Registry, folder: Path) -> float:
    """The first import's limit: skopeo's download of every blob of the first version at once,
    onto the disk as an import keeps them."""
    prefault(PREFAULT_GIB)
    began = time.perf_counter()
    subprocess.run(["skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{registry.address}/bench/lifecycle:v1",
                    f"dir:{folder}"], check=True, capture_output=True)
    took = time.perf_counter() - began
    shutil.rmtree(folder)
    return took


def wire_s(registry: Registry) -> float:
    """The download with no disk in it: every blob of the first version (the config and the
    layers) fetched at once by curl into /dev/null, on freshly touched memory as the others."""
    import httpx

    answer = httpx.get(f"http://{registry.address}/v2/bench/lifecycle/manifests/v1", timeout=30, headers={
        "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"})
    answer.raise_for_status()
    manifest = answer.json()
    digests = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]
    prefault(PREFAULT_GIB)
    began = time.perf_counter()
    subprocess.run(["curl", "-sSf", "--parallel", "--parallel-max", str(len(digests)),
                    *(part for digest in digests for part in
                      ("-o", "/dev/null", f"http://{registry.address}/v2/bench/lifecycle/blobs/{digest}"))],
                   check=True, capture_output=True)  # curl draws its parallel meter even with -s
    return time.perf_counter() - began


def limit_s(registry: Registry, workdir: Path, number: int) -> float:
    """The limit of a new version: a cold import of an image of its new layer alone."""
    home = user_home(workdir / f"limit{number}", "out")
    return timed("limit", [[*AS_USER, HYDRIA, "import", "-q", "-o", str(home / "out/new.sqsh"),
                            f"docker://{registry.address}#bench/lifecycle:new"]], user_env(home)).wall


def store_round(registry: Registry, workdir: Path, number: int) -> dict[str, float]:
    """The store row: the owner's ``store import`` of the new version after the version before."""
    uri = f"docker://{registry.address}#bench/lifecycle"
    results = {}
    for kind in ("merged", "layered"):
        home = user_home(workdir / f"store-{kind}{number}", "store")
        env = user_env(home, HYDRIA_STORE_PATH=str(home / "store"), HYDRIA_LAYERED_IMAGES="y" if kind == "layered" else "n")
        subprocess.run([*AS_USER, HYDRIA, "store", "init"], env=env, check=True, capture_output=True)
        assert timed("v1", [[*AS_USER, HYDRIA, "store", "import", f"{uri}:v1"]], env).ok
        measure = timed("v2", [[*AS_USER, HYDRIA, "store", "import", f"{uri}:v2"]], env)
        assert measure.ok
        results[f"store {kind} import"] = measure.wall
        shutil.rmtree(home)
    return results


def task_round(registry: Registry, workdir: Path, number: int, task_s: float = 15.0) -> dict[str, float]:
    """The task row: what a task that read one 3 MB file leaves on the node, and reads of the image."""
    home = user_home(workdir / f"task{number}", "out")
    env = user_env(home, HYDRIA_READ_CACHE_PATH=str(home / "read-cache"))
    image, _ = layered_s(f"docker://{registry.address}#bench/lifecycle:v2", home / "out/v2.sqsh", env)
    layers = image_layers(str(image))
    drop_caches()
    # The files the task reads: the new one, and busybox (sh, cat, stat, sleep), measured inside.
    task = f"cat /update/new > /dev/null; stat -L -c %s /update/new /bin/busybox; sleep {task_s}"
    sizes = subprocess.run([*AS_USER, HYDRIA, "start", str(image), "sh", "-c", task], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    # The image's reader and the unpack behind the container end with it.
    assert live_processes(USER, wait=60) == [], f"{USER.name}'s processes still run 60 s after the task"
    resident = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *layers], check=True,
                              capture_output=True, text=True).stdout.split()
    results = {"task kept": disk_usage(home / "read-cache"), "task image read": sum(map(int, resident)),
               "task limit": sum(map(int, sizes)), "image metadata": sum(map(squashfs_tables, layers)),
               "image size": sum(os.path.getsize(layer) for layer in layers)}
    shutil.rmtree(home)
    return results


def disk_usage(folder: Path) -> int:
    """Bytes that the files and folders under ``folder`` take on its disk (``du``'s count)."""
    return int(subprocess.run(["du", "-s", "-B1", str(folder)], check=True, capture_output=True,
                              text=True).stdout.split()[0])


def squashfs_tables(image: str) -> int:
    """Bytes of a squashfs image's tables (inodes, folders, fragments, ids): what follows its
    data, from the inode table's start to the bytes used."""
    with open(image, "rb") as handle:
        superblock = handle.read(96)
    used, inode_table = (int.from_bytes(superblock[start:start + 8], "little") for start in (40, 64))
    return used - inode_table


ROWS = {"import": one_round, "store": store_round, "rebuild": rebuild_round, "task": task_round}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=("test", "ngc"), default="test")
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"which rows, of {','.join(ROWS)}")
    parser.add_argument("--task-s", type=float, default=15.0, help="how long the task row's task runs")
    options = parser.parse_args()
    rows = options.rows.split(",")
    if not set(rows) <= set(ROWS):
        parser.error(f"--rows: {options.rows!r}: each of {','.join(ROWS)}")
    with tempfile.TemporaryDirectory(prefix="hydria-lifecycle-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        with Registry(workdir / "registry") as registry:
            big = big_image(options.size_mb, workdir) if options.shape == "test" else ngc_image(options.size_mb, workdir)
            base = Image([*get_image("busybox", workdir).layers, *big.layers], big.config)  # a shell to start
            update = new_layer(workdir)
            push([base], registry.address, "bench/lifecycle", "v1", workdir)
            push([Image([*base.layers, *update.layers], base.config)], registry.address, "bench/lifecycle", "v2",
                 workdir)
            push([update], registry.address, "bench/lifecycle", "new", workdir)
            enroot = real_enroot()
            if enroot and {"import", "rebuild"} & set(rows):
                for tag, layers in (("v1", base.layers), ("v2", [*base.layers, *update.layers])):
                    push([Image(layers, base.config, manifest_format="docker")], registry.address, ENROOT_REPOSITORY,
                         tag, workdir)
            reads = TEST_READS if options.shape == "test" else NGC_READS
            measure = {**ROWS, "import": partial(one_round, reads=reads, enroot=enroot),
                       "rebuild": partial(rebuild_round, enroot=enroot), "task": partial(task_round, task_s=options.task_s)}
            rounds = [{key: value for row in rows for key, value in measure[row](registry, workdir, number).items()}
                      for number in range(options.rounds)]
            if "store" in rows and "import" not in rows:  # the limit of the new-version rows
                rounds = [{**r, "limit": limit_s(registry, workdir, number)} for number, r in enumerate(rounds)]
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    limit = median.get("limit")
    print(f"{options.size_mb} MB image ({options.shape} shape, {len(big.layers)} layers and busybox's), new version "
          f"with one {NEW_LAYER_MB} MB layer (medians of {options.rounds}"
          f"{'; limit: a cold import of the new layer alone' if limit else ''})")
    lines = [("new version, merged into one file", "merged import", limit),
             ("new version, layered", "layered import", limit),
             ("new version, enroot import", "enroot import", limit),
             ("store import, one image file", "store merged import", limit),
             ("store import, layered", "store layered import", limit),
             ("limit (the new layer alone)", "limit", None),
             ("rebuild, one file (-o)", "merged rebuild", median.get("rebuild limit")),
             ("rebuild, layered (-t)", "layered rebuild", median.get("rebuild limit")),
             ("rebuild, podman build", "podman rebuild", median.get("rebuild limit")),
             ("rebuild, podman + enroot import", "enroot rebuild", median.get("rebuild limit")),
             ("limit (the changed step)", "rebuild limit", None)]
    for label, key, against in lines:
        if key in median:
            ratio = f"  ({median[key] / against:.1f}x the limit)" if against else ""
            print(f"  {label + ':':36} {median[key]:6.2f} s{ratio}")
    if "merged first import" in median:
        print(f"  first import, merged / layered:    {median['merged first import']:.2f} s / "
              f"{median['layered first import']:.2f} s "
              f"({median['layered first import'] / median['merged first import']:.2f}x; CPU "
              f"{median['merged first import cpu']:.1f} s / {median['layered first import cpu']:.1f} s)")
        if "enroot first import" in median:
            print(f"  first import, enroot:              {median['enroot first import']:.2f} s "
                  f"(CPU {median['enroot first import cpu']:.1f} s)")
        print(f"  limit (every blob downloaded at once): {median['download']:.2f} s "
              f"(layered first import {median['layered first import'] / median['download']:.1f}x"
              + (f", enroot {median['enroot first import'] / median['download']:.1f}x" if "enroot first import" in median
                 else "") + ")")
        print(f"  the wire (every blob at once into /dev/null): {median['wire']:.2f} s "
              f"(layered first import {median['layered first import'] / median['wire']:.1f}x)")
        download = median["download"]
        print(f"  first task (the first import, then start true), merged / layered: {median['merged first task']:.2f} s"
              f" / {median['layered first task']:.2f} s ({median['merged first task'] / download:.1f}x / "
              f"{median['layered first task'] / download:.1f}x the download"
              + (f"; enroot {median['enroot first task']:.2f} s, {median['enroot first task'] / download:.1f}x"
                 if "enroot first task" in median else "") + ")")
    if "task kept" in median:
        read, kept, tables = median["task limit"], median["task kept"], median["image metadata"]
        print(f"  a {options.task_s:.0f} s task that read one {NEW_LAYER_MB} MB file (limit: {read / 2**20:.1f} MiB, "
              f"that file and busybox; the image's tables {tables / 2**10:.0f} KiB, "
              f"the image {median['image size'] / 2**30:.2f} GiB):")
        print(f"    kept on the node:           {kept / 2**20:8.1f} MiB ({kept / read:.1f}x the bytes read)")
        print(f"    read of the image's files:  {median['task image read'] / 2**20:8.1f} MiB "
              f"({median['task image read'] / (read + tables):.1f}x the bytes read and the tables)")
    if "enroot create kept" in median:
        print(f"  enroot create of the new version (a pyxis step's container) keeps on the node: "
              f"{median['enroot create kept'] / 2**30:.2f} GiB")
    if "merged start ms" in median:
        print(f"  start, merged / layered:           {median['merged start ms']:.0f} ms / "
              f"{median['layered start ms']:.0f} ms"
              + (f" (enroot start IMAGE.sqsh {median['enroot start ms']:.0f} ms)" if "enroot start ms" in median else ""))
        print(f"  cold read of every file, merged / layered: {median['merged cold read']:.2f} s / "
              f"{median['layered cold read']:.2f} s ({median['layered cold read'] / median['merged cold read']:.2f}x)"
              + (f" (enroot {median['enroot cold read']:.2f} s)" if "enroot cold read" in median else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
