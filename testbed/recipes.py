"""The test images, built from Debian packages by this project's own code (never from Docker Hub).

* ``busybox``: one layer with Debian's static busybox; builds in a second.
* ``gpu-probe``: glibc, busybox and a CUDA driver-API program, for the GPU proof on real hardware.
* ``mpi``: Debian bookworm with Open MPI and mpi4py (mmdebstrap), and an MPICH program, for MPI
  under Slurm: Debian builds Open MPI for PMIx only; MPICH speaks PMI2.
* ``debian``: Debian bookworm with python3 (mmdebstrap), split into layers, plus an upper layer
  that deletes files, replaces a directory (whiteouts, an opaque directory), and adds a hardlink,
  symlinks, a file with spaces in its name and a file with a non-root owner; the config has Env,
  WorkingDir, Entrypoint, Cmd, Labels and a Volume.

A built image is kept in a cache directory keyed by a hash of its recipe (these files and the
builder's arguments), so later runs on the same machine reuse it; without the cache it is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from testbed.oci import Blob, Image, Layer, make_layer
from testbed.tarbuild import EPOCH, LayerTar

DEFAULT_CACHE = Path(os.environ.get("HYDRIA_TESTBED_CACHE", "/var/cache/hydria-testbed"))
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MMDEBSTRAP_ARGS = (
    "--variant=minbase", "--include=python3", "--format=tar",
    "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*", "bookworm",
)
MPI_PACKAGES = "openmpi-bin,python3-mpi4py,libpmix2,libmpich12"
MPI4PY_HELLO = """#!/usr/bin/python3
# The mpi4py test program of the mpi test image (Open MPI): rank, size and an allreduce.
from mpi4py import MPI

world = MPI.COMM_WORLD
total = world.allreduce(world.Get_rank() + 1)
print(f"rank {world.Get_rank()} of {world.Get_size()} sum {total} lib {MPI.Get_library_version()[:12]}")
"""
# Paths that go to the second layer of the Debian image, so the base layer holds no python.
_PYTHON_LAYER = re.compile(r"usr/(lib|share|bin)/[^/]*python3|usr/lib/python3|usr/share/doc/[^/]*python3"
                           r"|var/lib/dpkg/info/[^/]*python3")

ENTRYPOINT_SCRIPT = """#!/bin/sh
# The test image's ENTRYPOINT: marks the environment so tests can see that it ran.
export HYDRIA_ENTRYPOINT=ran
exec "$@"
"""


def build_busybox(workdir: Path) -> Image:
    """A one-layer image: Debian's busybox-static and its applet links in /bin."""
    busybox = Path("/bin/busybox")
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "busybox-static"],
                             capture_output=True, text=True, check=True).stdout
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    tar_path = workdir / "busybox-layer.tar"
    with LayerTar(tar_path) as layer:
        for directory, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777),
                                ("dev", 0o755), ("proc", 0o755), ("sys", 0o755), ("home", 0o755)):
            layer.directory(directory, mode)
        layer.file("bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet != "busybox":
                layer.symlink(f"bin/{applet}", "busybox")
        layer.file("etc/os-release", (
            'PRETTY_NAME="hydria busybox test image"\nNAME="hydria-busybox"\n'
            f'VERSION_ID="{version}"\nID=hydria-busybox\n'))
        layer.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        layer.file("etc/group", "root:x:0:\nnogroup:x:65534:\n")
    config = {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}
    return Image([make_layer(tar_path, workdir)], config)


def build_debian(workdir: Path) -> Image:
    """Debian bookworm with python3 in three layers; see the module docstring."""
    rootfs = workdir / "rootfs.tar"
    subprocess.run(["mmdebstrap", "--quiet", *MMDEBSTRAP_ARGS, str(rootfs)], check=True,
                   env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    base, python = workdir / "layer-base.tar", workdir / "layer-python.tar"
    _split_rootfs(rootfs, base, python)
    rootfs.unlink()
    changes = workdir / "layer-changes.tar"
    with LayerTar(changes) as layer:
        layer.whiteout("etc/issue.net")                  # a file from the base layer
        layer.whiteout("usr/share/doc/bash")             # a directory from the base layer
        layer.whiteout("usr/lib/python3.11/pydoc_data")  # a directory from the python layer
        layer.directory("etc/apt/apt.conf.d")            # replaced wholesale: opaque
        layer.opaque("etc/apt/apt.conf.d")
        layer.file("etc/apt/apt.conf.d/99hydria-test", 'APT::Install-Recommends "false";\n')
        layer.file("etc/motd", "hydria test image\n")    # overrides the base layer's file
        layer.directory("usr/local/bin")
        layer.file("usr/local/bin/hydria-entrypoint", ENTRYPOINT_SCRIPT, 0o755)
        layer.directory("opt/hydria-test")
        layer.file("opt/hydria-test/data.txt", "shared content\n")
        layer.hardlink("opt/hydria-test/data-hardlink.txt", "opt/hydria-test/data.txt")
        layer.symlink("opt/hydria-test/relative-link", "data.txt")
        layer.symlink("opt/hydria-test/absolute-link", "/etc/os-release")
        layer.file("opt/hydria-test/file with spaces.txt", "spaces\n")
        layer.file("opt/hydria-test/owned-by-1234", "not root's\n", 0o640, uid=1234, gid=1234)
        layer.directory("data")
    config = {
        "Env": [f"PATH={STANDARD_PATH}", "LANG=C.UTF-8", "HYDRIA_TEST_IMAGE=debian",
                "GREETING=hello world"],
        "WorkingDir": "/opt/hydria-test",
        "Entrypoint": ["/usr/local/bin/hydria-entrypoint"],
        "Cmd": ["python3", "-c", "import sys; print('python', sys.version.split()[0])"],
        "Labels": {"org.opencontainers.image.title": "hydria test debian"},
        "Volumes": {"/data": {}},
    }
    return Image([make_layer(path, workdir) for path in (base, python, changes)], config)


def _split_rootfs(rootfs: Path, base: Path, python: Path) -> None:
    """Python files to one layer, the rest to another."""
    with tarfile.open(rootfs) as source, LayerTar(base) as base_layer, LayerTar(python) as python_layer:
        _copy_rootfs(source, lambda name: python_layer if _PYTHON_LAYER.match(name) else base_layer)


def _copy_rootfs(source: tarfile.TarFile, layer_for: Callable[[str], LayerTar]) -> None:
    """mmdebstrap's tar into layers (``layer_for`` picks one by path); device nodes are dropped as
    Docker does, and a hardlink stays in its target's layer."""
    placement: dict[str, LayerTar] = {}
    for member in source:
        name = member.name.removeprefix("./")
        if name in ("", ".") or name.startswith("dev/") and not member.isdir():
            continue
        layer = placement[member.linkname.removeprefix("./")] if member.islnk() else layer_for(name)
        placement[name] = layer
        layer.copy_member(member, source.extractfile(member) if member.isreg() else None)


def build_gpu_probe(workdir: Path) -> Image:
    """A small glibc image for proving GPU access on real hardware: the host's glibc (Debian's
    libc6) and ldconfig, busybox, and ``cuda-probe`` (testbed/cuda_probe.c) compiled here. It asks
    for GPUs the way CUDA images do (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES)."""
    probe = workdir / "cuda-probe"
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(Path(__file__).parent / "cuda_probe.c")], check=True)
    libc = subprocess.run(["dpkg", "-L", "libc6"], capture_output=True, text=True, check=True).stdout.split()
    tar_path = workdir / "gpu-probe-layer.tar"
    with LayerTar(tar_path) as layer:
        for directory in ("usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/lib64",
                          "etc", "etc/ld.so.conf.d", "tmp", "dev", "proc", "sys", "root"):
            layer.directory(directory, 0o1777 if directory == "tmp" else 0o755)
        for link in ("bin", "sbin", "lib", "lib64"):
            layer.symlink(link, f"usr/{link}")
        for path in libc:
            if path.startswith("/lib/x86_64-linux-gnu/") and ".so" in path:
                layer.file("usr" + path, Path(path).read_bytes(), 0o755)
        layer.symlink("usr/lib64/ld-linux-x86-64.so.2", "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        layer.file("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
        layer.file("etc/ld.so.conf.d/x86_64-linux-gnu.conf", "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
        layer.file("usr/sbin/ldconfig", Path("/sbin/ldconfig").read_bytes(), 0o755)
        layer.file("usr/bin/busybox", Path("/bin/busybox").read_bytes(), 0o755)
        for applet in ("sh", "ls", "cat", "env", "readlink", "grep", "echo", "id", "true"):
            layer.symlink(f"usr/bin/{applet}", "busybox")
        layer.file("usr/bin/cuda-probe", probe.read_bytes(), 0o755)
        layer.file("etc/os-release", 'PRETTY_NAME="hydria GPU probe image"\nID=hydria-gpu-probe\n')
        layer.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
        layer.file("etc/group", "root:x:0:\n")
    config = {"Env": ["PATH=/usr/bin:/usr/sbin", "NVIDIA_VISIBLE_DEVICES=all",
                      "NVIDIA_DRIVER_CAPABILITIES=compute,utility"], "Cmd": ["cuda-probe"]}
    return Image([make_layer(tar_path, workdir)], config)


def build_mpi(workdir: Path) -> Image:
    """Open MPI and mpi4py from Debian, plus ``mpich-hello`` (testbed/mpi_hello.c, built here with
    Debian's MPICH, whose runtime the image has), in one layer; see the module docstring."""
    hello = workdir / "mpich-hello"
    subprocess.run(["mpicc.mpich", "-O2", "-o", str(hello), str(Path(__file__).parent / "mpi_hello.c")], check=True)
    rootfs = workdir / "rootfs.tar"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={MPI_PACKAGES}", "--format=tar",
                    *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "locale", "info", "doc")),
                    "bookworm", str(rootfs)], check=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    layer = workdir / "layer.tar"
    with tarfile.open(rootfs) as source, LayerTar(layer) as target:
        _copy_rootfs(source, lambda name: target)
        target.file("usr/local/bin/mpich-hello", hello.read_bytes(), 0o755)
        target.file("usr/local/bin/mpi4py-hello", MPI4PY_HELLO, 0o755)
    rootfs.unlink()
    config = {"Env": [f"PATH={STANDARD_PATH}", "LANG=C.UTF-8"], "Cmd": ["/bin/bash"]}
    return Image([make_layer(layer, workdir)], config)


RECIPES: dict[str, Callable[[Path], Image]] = {"busybox": build_busybox, "debian": build_debian,
                                               "gpu-probe": build_gpu_probe, "mpi": build_mpi}


def recipe_key(name: str) -> str:
    """Hash of what determines the image: the builder modules' source and mmdebstrap's arguments."""
    h = hashlib.sha256(name.encode())
    for module in ("oci.py", "tarbuild.py", "recipes.py", "cuda_probe.c", "mpi_hello.c"):
        h.update((Path(__file__).parent / module).read_bytes())
    h.update(json.dumps([MMDEBSTRAP_ARGS, MPI_PACKAGES]).encode())
    return h.hexdigest()[:16]


def get_image(name: str, workdir: Path, cache: Path | None = DEFAULT_CACHE) -> Image:
    """The image of recipe ``name``, from the cache when it holds this recipe's build.

    Without a usable cache directory the image is built into ``workdir``.
    """
    if cache is not None:
        entry = cache / f"{name}-{recipe_key(name)}"
        if (entry / "image.json").exists():
            return _load(entry)
        try:
            cache.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
        except OSError:
            return RECIPES[name](workdir)
        try:
            _save(RECIPES[name](staging), staging)
            staging.rename(entry)
        except OSError:
            if not (entry / "image.json").exists():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return _load(entry)
    return RECIPES[name](workdir)


def _save(image: Image, directory: Path) -> None:
    layers = [{"blob": layer.blob.path.name, "digest": layer.blob.digest, "size": layer.blob.size,
               "media_type": layer.blob.media_type, "diff_id": layer.diff_id, "tar": layer.tar_path.name}
              for layer in image.layers]
    (directory / "image.json").write_text(json.dumps({"config": image.config, "layers": layers}))


def _load(directory: Path) -> Image:
    saved = json.loads((directory / "image.json").read_text())
    layers = [Layer(Blob(directory / entry["blob"], entry["digest"], entry["size"], entry["media_type"]),
                    entry["diff_id"], directory / entry["tar"]) for entry in saved["layers"]]
    return Image(layers, saved["config"])
