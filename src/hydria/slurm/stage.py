"""``hydria stage IMAGE`` in a batch script: import a registry image once, on the batch host, and
broadcast it with Slurm's own ``sbcast`` to every node of the allocation, where it becomes a kept
image of the node's cache (docs/import.md), so that ``srun --container-image=IMAGE`` finds it on
every node and downloads nothing but the manifest. For clusters whose nodes share no file system
(docs/store.md); with a shared one, the image store does this without a broadcast.

The file goes to each node's temporary folder (``HYDRIA_TEMP_PATH``, which must be the same path
on every node), then one task per node adopts it into that node's cache (``--adopt``).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from hydria.config import Settings
from hydria.digits import is_number
from hydria.errors import HydriaError, InvalidArgument, MissingTool
from hydria.image.importer import image_digest, import_image
from hydria.image.kept.user_cache import ImageCache
from hydria.image.ref.manifest import parse_platform
from hydria.image.ref.reference import RegistryImage, parse
from hydria.log import Logger
from hydria.paths import hydria_command, user_name
from hydria.runtime.rootfs import check_image
from hydria.tools import run_tool

log = Logger(__name__)


def stage(uri: str, settings: Settings, arch: str | None = None) -> int:
    """Import ``uri`` here and make it a kept image on every node of the allocation; the node count."""
    job, nodes = os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURM_JOB_NUM_NODES", "")
    if not job or not is_number(nodes):
        raise HydriaError("hydria stage runs in a Slurm allocation (a batch script or salloc)",
                          hint="sbatch -N4 --wrap 'hydria stage IMAGE && srun --container-image=IMAGE ...'")
    for program in ("sbcast", "srun"):
        if shutil.which(program) is None:
            raise MissingTool(program, hint="run it where Slurm's clients are")
    _kept_images(settings)
    uri = uri if uri.startswith("docker://") else f"docker://{uri}"
    digest = image_digest(uri, settings, arch=arch)
    name = f".hydria-stage-{os.getuid()}-{job}-{digest.split(':')[-1][:16]}"
    source, target = Path(settings.temp_path) / f"{name}-source.sqsh", Path(settings.temp_path) / f"{name}.sqsh"
    source.unlink(missing_ok=True)
    try:
        image = import_image(uri, settings, output=str(source), arch=arch)
        log.info("Broadcasting %s to %s node(s)", uri, nodes)
        _run(["sbcast", "--force", "--preserve", str(image), str(target)], "sbcast")
        _run(["srun", f"--nodes={nodes}", "--ntasks-per-node=1", *hydria_command(), "stage", "--adopt",
              str(target), "--digest", digest, *(("--arch", arch) if arch else ()), uri], "srun")
    finally:
        source.unlink(missing_ok=True)
    return int(nodes)


def adopt(staged: str, uri: str, digest: str, arch: str | None, settings: Settings) -> None:
    """On one node: the broadcast file becomes a kept image of this node's cache."""
    path = Path(staged)
    _check_own(path)  # before the try: another user's file stays theirs
    try:
        check_image(path)
        ref = parse(uri)
        if not isinstance(ref, RegistryImage):
            raise InvalidArgument(uri, hint="hydria stage takes registry images")
        _kept_images(settings).entry(ref.uri, digest, settings.squash_options, parse_platform(arch)).keep(path)
    finally:
        path.unlink(missing_ok=True)


def _check_own(path: Path) -> None:
    """The broadcast file is in a folder other users may write (a node's /tmp): one that another
    user made first, or can still write, could be rewritten after it became a kept image."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1 or info.st_mode & 0o022:
        raise HydriaError(f"{path} is not a file of yours alone (owner {user_name(info.st_uid)}, mode "
                          f"{stat.S_IMODE(info.st_mode):04o}, {info.st_nlink} links): not kept",
                          hint="another user may have made it first in a shared temporary folder: remove it, "
                               "or set HYDRIA_TEMP_PATH to a folder of your own")


def _kept_images(settings: Settings) -> ImageCache:
    images = ImageCache(settings.cache_path, settings.cache_images)
    if settings.cache_images == 0 or not images.usable():
        raise HydriaError("hydria stage leaves the image among the kept images of each node's cache, and there "
                          "are none here", hint="set HYDRIA_CACHE_IMAGES to 1 or more, and HYDRIA_CACHE_PATH to a "
                                                "folder of your own")
    return images


def _run(argv: list[str], what: str) -> None:
    """``argv`` without the job's container options: staging runs on the nodes themselves."""
    run_tool(argv, f"{what} failed", env={key: value for key, value in os.environ.items() if not _container_option(key)})


def _container_option(variable: str) -> bool:
    """Whether ``variable`` passes a --container-* option or its default on to a job's steps
    (``SLURM_SPANK_..._container_image`` from #SBATCH lines, ``HYDRIA_CONTAINER_IMAGE``, ...)."""
    upper = variable.upper()
    return "CONTAINER" in upper and upper.startswith(("SLURM_SPANK", "PYXIS_", "HYDRIA_"))
