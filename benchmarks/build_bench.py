"""Build benchmark: ``hydria build`` beside ``podman build`` and Charliecloud's ``ch-image build``
on the same Dockerfiles, FROM the Debian test image; then ``hydria push`` beside ``skopeo copy``.

Dockerfiles: ``apt`` (``apt-get install`` of a few packages from the Debian mirror, a COPY, a
RUN of Python), ``files`` (COPY of 3,000 small files, then a RUN that reads them all). For each
tool, with the base image already in its storage (pulled or imported once, not timed):

* cold: an empty build cache; hydria's figure is the build (``Built in``) and, beside it, the
  whole command with the squashfs written (``-o``);
* cached: the same build again, unchanged.

Pushes go to the test registry: the built image to a new repository (hydria mounts the base
image's layers from their repository; skopeo copies the same OCI layout and sends what the
repository lacks), then again (everything is there).

hydria and ch-image build as the unprivileged test user; podman as root (``--isolation=chroot
--network=host``: its OCI runtime refuses these machines' cgroups). ch-image cannot pull over
plain HTTP, so the base image is imported into its storage from a tarball of the same tree.

    python -m benchmarks.build_bench [--rounds 3]     (as root; needs podman, skopeo, ch-image)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compiled import compile_hydria
from testbed.publish import publish
from testbed.registry import Registry
from testbed.users import TEST_USERS, User, run_as

HYDRIA = str(Path(sys.executable).parent / "hydria")
CH_IMAGE = ["/usr/bin/python3", "/usr/bin/ch-image"]
DOCKERFILES = {
    "apt": """FROM {base}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends hello cowsay bc && rm -rf /var/lib/apt/lists/*
COPY app/ /app/
RUN python3 -c "import compileall; compileall.compile_dir('/app', quiet=1)" && hello > /app/hello.txt
""",
    "files": """FROM {base}
COPY data/ /data/
RUN find /data -type f | xargs cat | wc -c > /data-size.txt
""",
}


def context(folder: Path, name: str, base: str, owner: User) -> Path:
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(DOCKERFILES[name].format(base=base))
    (folder / "app").mkdir()
    for number in range(20):
        (folder / "app" / f"module{number}.py").write_text(f"def f{number}():\n    return {number}\n" * 50)
    if name == "files":
        for number in range(3000):
            part = folder / "data" / f"d{number % 30}"
            part.mkdir(parents=True, exist_ok=True)
            (part / f"f{number}.txt").write_text(f"file {number}\n" * (number % 40 + 1))
    subprocess.run(["chown", "-R", f"{owner.uid}:{owner.gid}", str(folder)], check=True)
    return folder


def wall(argv: list[str], user: User | None, env: dict[str, str], cwd: Path) -> tuple[float, str]:
    os.sync()
    started = time.perf_counter()
    if user is None:
        result = subprocess.run(argv, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True, check=False)
    else:
        result = run_as(user, argv, env=env, cwd=cwd, timeout=1800)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed:\n{result.stderr[-2000:]}")
    return elapsed, result.stderr


def built_in(log: str) -> float:
    return float(re.findall(r"Built in ([0-9.]+) s", log)[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    compile_hydria()
    user = User.lookup(TEST_USERS[0])
    work = Path(tempfile.mkdtemp(prefix="hydria-build-bench-", dir="/var/tmp"))
    work.chmod(0o755)
    registry = Registry(work / "registry")
    registry.start()
    try:
        (work / "images").mkdir()
        image = publish("debian", "latest", registry, work / "images")
        base = f"{registry.address}/{image.repository}:{image.tag}"
        env = {"HYDRIA_ALLOW_HTTP": "y", "HYDRIA_CACHE_PATH": str(work / "hydria-cache"), "USER": user.name,
               "CH_IMAGE_STORAGE": str(work / "ch" / "storage"),  # ch-image's build cache is a git repository
               **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
                  for what, value in (("NAME", "bench"), ("EMAIL", "bench@localhost"))}}
        storage = ["--root", str(work / "podman-root"), "--runroot", str(work / "podman-run")]
        podman = ["podman", *storage]
        rootfs = work / "base-rootfs.tar"
        for folder in ("out", "hydria-cache", "ch"):
            (work / folder).mkdir()
            os.chown(work / folder, user.uid, user.gid)
        # the base in every tool's storage, untimed
        subprocess.run([*podman, "pull", "-q", "--tls-verify=false", base], check=True, capture_output=True)
        container = subprocess.run([*podman, "create", base, "true"], check=True, capture_output=True,
                                   text=True).stdout.strip()
        with open(rootfs, "wb") as out:
            subprocess.run([*podman, "export", container], check=True, stdout=out)
        rootfs.chmod(0o644)
        wall([*CH_IMAGE, "import", str(rootfs), "hydria-base"], user, env, work / "out")
        rows = []
        for name in DOCKERFILES:
            ctx = context(work / f"ctx-{name}", name, base, user)
            ch_ctx = context(work / f"ctx-ch-{name}", name, "hydria-base", user)
            figures: dict[str, list[float]] = {}
            for round_number in range(options.rounds):
                build_cache = work / "hydria-cache" / "build"
                for folder in ("steps", "blobs", "trees"):
                    shutil.rmtree(build_cache / folder, ignore_errors=True)
                command = [HYDRIA, "build", "-t", f"bench-{name}:1", "-o", f"{name}.sqsh", str(ctx)]
                total, log = wall(command, user, env, work / "out")
                figures.setdefault("hydria cold (build)", []).append(built_in(log))
                figures.setdefault("hydria cold (with squash)", []).append(total)
                total, log = wall(command, user, env, work / "out")
                figures.setdefault("hydria cached (build)", []).append(built_in(log))
                figures.setdefault("hydria cached (with squash)", []).append(total)
                podman_options = ["-q", "--isolation=chroot", "--network=host", "--tls-verify=false", "-t", f"bench-{name}"]
                figures.setdefault("podman cold", []).append(
                    wall([*podman, "build", "--no-cache", *podman_options, str(ctx)], None, {}, work)[0])
                figures.setdefault("podman cached", []).append(
                    wall([*podman, "build", *podman_options, str(ctx)], None, {}, work)[0])
                ch_options = ["--force", "-t", f"bench-{name}", str(ch_ctx)]
                figures.setdefault("ch-image cold", []).append(
                    wall([*CH_IMAGE, "build", "--rebuild", *ch_options], user, env, work / "out")[0])
                figures.setdefault("ch-image cached", []).append(
                    wall([*CH_IMAGE, "build", *ch_options], user, env, work / "out")[0])
            rows += [(name, tool, statistics.median(values)) for tool, values in figures.items()]
        layout = work / "out" / "layout"
        wall([HYDRIA, "build", "-t", "bench-apt:1", "--oci", str(layout), str(work / "ctx-apt")], user, env, work / "out")
        for attempt in ("new repository", "again"):
            rows.append(("push", f"hydria push ({attempt})", wall(
                [HYDRIA, "push", "bench-apt:1", f"docker://{registry.address}#bench/hydria:1"], user, env, work / "out")[0]))
            rows.append(("push", f"skopeo copy ({attempt})", wall(
                ["skopeo", "copy", "-q", "--dest-tls-verify=false", f"oci:{layout}",
                 f"docker://{registry.address}/bench/skopeo:1"], None, {}, work)[0]))
    finally:
        registry.stop()
        subprocess.run(["podman", "--root", str(work / "podman-root"), "--runroot", str(work / "podman-run"),
                        "system", "reset", "-f"], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'Dockerfile':<10} {'tool':<30} {'median wall s':>13}")
    for name, tool, seconds in rows:
        print(f"{name:<10} {tool:<30} {seconds:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
