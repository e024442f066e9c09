"""Lifecycle benchmark: what a step of an image's life costs against what changed or was read.

Rows measured so far (issue 38 lists the others: the bytes a task reads, the first start of a
never-seen image):

* **a first import**: the image's first version, nothing of it in the cache, merged against layered.
* **a new version**: an image whose only new layer is 3 MB, imported after the version before it
  (its layers' blobs in the cache). hydria merged into one file (``hydria import -o``, every layer
  merged and squashed again) against a layered import (``HYDRIA_LAYERED_IMAGES``: what a Slurm
  step's import does, image/layered_import.py), beside the limit: a cold import of an image of
  that one new layer (its download and squash).
* **a rebuild**: ``hydria build`` of a Dockerfile ``FROM`` the image whose last ``RUN`` changed,
  after a build of the version before (the base image and the unchanged steps in the caches).
  Written as one file (``-o``: every layer merged and squashed again) against a layered image
  (``-t`` with ``HYDRIA_LAYERED_IMAGES``: the changed step's layer squashed), beside the limit:
  the changed step's own time, as the build shows it (``#N DONE 0.1s``).
* **a new version in the image store**: ``hydria store import`` of the new version after the
  version before, by the store's owner: one image file (``HYDRIA_LAYERED_IMAGES=n``) against a
  layered store (``=y``: docs/store.md), beside the same limit as the first row.
* **a start** of the new version (``hydria start IMAGE true``, median of 20) and **a cold read**
  of all its data (``cat`` of every file after dropping the page cache), merged against layered.

Run as root: python benchmarks/lifecycle_bench.py [--size-mb 2048] [--rounds 3] [--rows import,store,rebuild]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_bench import HYDRIA, PREFAULT_GIB, big_image, prefault, timed

from testbed.oci import Image, make_layer, push
from testbed.recipes import get_image
from testbed.registry import Registry
from testbed.tarbuild import LayerTar
from testbed.users import TEST_USERS, User

USER = User.lookup(TEST_USERS[0])  # every import and start as an ordinary user
AS_USER = ["setpriv", f"--reuid={USER.uid}", f"--regid={USER.gid}", "--clear-groups"]

NEW_LAYER_MB = 3
# What a Slurm step's import does, from the command line: the image in place, as a layered image.
LAYERED_IMPORT = ("import sys; from pathlib import Path; from hydria.config import load_settings; "
                  "from hydria.image.importer import import_image; "
                  "print(import_image(sys.argv[1], load_settings(), output=sys.argv[2], in_place=True))")


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


def start_ms(image: Path, env: dict[str, str], runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run([*AS_USER, HYDRIA, "start", str(image), "true"], env=env, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def cold_read_s(image: Path, env: dict[str, str]) -> float:
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
    began = time.perf_counter()
    subprocess.run([*AS_USER, HYDRIA, "start", str(image), "sh", "-c", "cat /data*/* /update/* > /dev/null"],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - began


def rebuild_round(registry: Registry, workdir: Path, number: int) -> dict[str, float]:
    """The rebuild row: the second of two builds that differ in their last RUN, each way."""
    results = {}
    for kind, output in (("merged", ["-o", "app.sqsh"]), ("layered", ["-t", "app:1"])):
        home = workdir / f"rebuild-{kind}{number}"
        context = home / "context"
        context.mkdir(parents=True)
        env = {**os.environ, "HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(home / "cache"), "HOME": str(home),
               "HYDRIA_LAYERED_IMAGES": "y" if kind == "layered" else "n"}
        for version in (1, 2):
            (context / "Dockerfile").write_text(f"FROM {registry.address}/bench/lifecycle:v1\n"
                                                f"RUN echo {version} > /version\n")
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


def one_round(registry: Registry, workdir: Path, number: int) -> dict[str, float]:
    uri = f"docker://{registry.address}#bench/lifecycle"
    results = {}
    for kind in ("merged", "layered"):
        home = user_home(workdir / f"{kind}{number}", "out")
        env = user_env(home, HYDRIA_DATA_PATH=str(home / "data"), HYDRIA_LAYERED_IMAGES="y", HYDRIA_READ_CACHE_SIZE="0")
        if kind == "merged":
            first = timed("v1", [[*AS_USER, HYDRIA, "import", "-q", "-o", str(home / "out/v1.sqsh"), f"{uri}:v1"]], env)
            assert first.ok
            measure = timed("v2", [[*AS_USER, HYDRIA, "import", "-q", "-o", str(home / "out/v2.sqsh"), f"{uri}:v2"]], env)
            assert measure.ok
            results[f"{kind} first import"] = first.wall
            results[f"{kind} import"], image = measure.wall, home / "out/v2.sqsh"
        else:
            results[f"{kind} first import"] = layered_s(f"{uri}:v1", home / "out/v1.sqsh", env)[1]
            image, results[f"{kind} import"] = layered_s(f"{uri}:v2", home / "out/v2.sqsh", env)
        results[f"{kind} start ms"] = start_ms(image, env)
        results[f"{kind} cold read"] = cold_read_s(image, env)
    results["limit"] = limit_s(registry, workdir, number)
    return results


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
    return results


ROWS = {"import": one_round, "store": store_round, "rebuild": rebuild_round}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"which rows, of {','.join(ROWS)}")
    options = parser.parse_args()
    rows = options.rows.split(",")
    if not set(rows) <= set(ROWS):
        parser.error(f"--rows: {options.rows!r}: each of {','.join(ROWS)}")
    with tempfile.TemporaryDirectory(prefix="hydria-lifecycle-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        with Registry(workdir / "registry") as registry:
            big = big_image(options.size_mb, workdir)
            base = Image([*get_image("busybox", workdir).layers, *big.layers], big.config)  # a shell to start
            update = new_layer(workdir)
            push([base], registry.address, "bench/lifecycle", "v1", workdir)
            push([Image([*base.layers, *update.layers], base.config)], registry.address, "bench/lifecycle", "v2",
                 workdir)
            push([update], registry.address, "bench/lifecycle", "new", workdir)
            rounds = [{key: value for row in rows for key, value in ROWS[row](registry, workdir, number).items()}
                      for number in range(options.rounds)]
            if "import" not in rows:  # the limit of the new-version rows
                rounds = [{**r, "limit": limit_s(registry, workdir, number)} for number, r in enumerate(rounds)]
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    limit = median["limit"]
    print(f"{options.size_mb} MB image in 7 layers, new version with one {NEW_LAYER_MB} MB layer "
          f"(medians of {options.rounds}; limit: a cold import of the new layer alone)")
    lines = [("new version, merged into one file", "merged import", limit),
             ("new version, layered", "layered import", limit),
             ("store import, one image file", "store merged import", limit),
             ("store import, layered", "store layered import", limit),
             ("limit (the new layer alone)", "limit", None),
             ("rebuild, one file (-o)", "merged rebuild", median.get("rebuild limit")),
             ("rebuild, layered (-t)", "layered rebuild", median.get("rebuild limit")),
             ("limit (the changed step)", "rebuild limit", None)]
    for label, key, against in lines:
        if key in median:
            ratio = f"  ({median[key] / against:.1f}x the limit)" if against else ""
            print(f"  {label + ':':36} {median[key]:6.2f} s{ratio}")
    if "merged first import" in median:
        print(f"  first import, merged / layered:    {median['merged first import']:.2f} s / "
              f"{median['layered first import']:.2f} s "
              f"({median['layered first import'] / median['merged first import']:.2f}x)")
    if "merged start ms" in median:
        print(f"  start, merged / layered:           {median['merged start ms']:.0f} ms / "
              f"{median['layered start ms']:.0f} ms")
        print(f"  cold read of every file, merged / layered: {median['merged cold read']:.2f} s / "
              f"{median['layered cold read']:.2f} s ({median['layered cold read'] / median['merged cold read']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
