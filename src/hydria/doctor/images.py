"""Where images come from and how they are read: the image reader, the read cache, the user's cache, the image store."""

from __future__ import annotations

import os
import shutil
import subprocess

from hydria.config import Settings
from hydria.container import read_cache
from hydria.doctor.folders import check_setting_path
from hydria.doctor.report import Check
from hydria.errors import HydriaError, MissingTool
from hydria.image.blobs import layout as cachelayout
from hydria.paths import hydria_command, private_dir_problem, user_name
from hydria.runtime.reader import (
    FALLBACK,
    installed_reader,
    reader_path,
    squashfs_server,
)
from hydria.units import format_size


def check_image_reader(settings: Settings) -> Check:
    """Which program serves image files on this node, and how to get the fast one."""
    name = "image reader"
    reader, fallback = installed_reader(), shutil.which(FALLBACK)
    install = (f"as the owner of hydria's installation: hydria install-reader (it puts {reader_path()}; "
               "needs gcc, pkg-config, libsquashfuse-dev and libfuse3-dev, or EPEL's squashfuse-devel and fuse3-devel)")
    if reader is not None and settings.fast_reader:
        return Check(name, "ok", f"hydria's reader ({reader}), the fast one (docs/performance.md)")
    if fallback is None and reader is not None:
        return Check(name, "fail", "HYDRIA_FAST_READER is off and squashfuse is not installed: no container can "
                                   "start from an image", "unset HYDRIA_FAST_READER, or install the package squashfuse")
    if fallback is None:
        return Check(name, "fail", "neither hydria's reader nor squashfuse is installed: no container can start "
                                   "from an image", f"{install}; or install the package squashfuse")
    if not settings.fast_reader:
        return Check(name, "warn", f"squashfuse ({fallback}): HYDRIA_FAST_READER is off; programs read images "
                                   "several times slower", "unset HYDRIA_FAST_READER" if reader else install)
    return Check(name, "warn", f"squashfuse ({fallback}): hydria's reader is not installed; programs read "
                               "images several times slower (small files ~6x)", install)


def check_read_cache(settings: Settings) -> Check:
    """Where later starts of an image read it from (container/read_cache.py), and what it holds."""
    name, setting = "read cache", "HYDRIA_READ_CACHE_PATH"
    cache = read_cache.configured(settings)
    local = "set HYDRIA_READ_CACHE_PATH to a folder on a node-local disk"
    if cache is None:
        if not settings.read_cache_size:
            return Check(name, "skip", "off (HYDRIA_READ_CACHE_SIZE is 0): every start reads through the image reader",
                         "set HYDRIA_READ_CACHE_SIZE, e.g. 40G")
        return Check(name, "fail", f"{setting} {settings.read_cache_path!r} "
                                   f"{read_cache.path_problem(settings.read_cache_path)}: every start reads through "
                                   "the image reader", "set HYDRIA_READ_CACHE_PATH to a path without them")
    problem = read_cache.placement_problem(cache.folder)
    if problem and settings.origins.get(setting) == "default":
        return Check(name, "skip", f"off: the default {cache.folder} {problem}", local)
    if not settings.fast_reader or installed_reader() is None:
        why = "HYDRIA_FAST_READER is off" if not settings.fast_reader else "hydria's image reader is not installed"
        return Check(name, "warn", f"off: {why}, and only it says which files a container reads: every start reads "
                                   "through squashfuse", "an administrator runs hydria install-reader (docs/install.md)"
                     if settings.fast_reader else "set HYDRIA_FAST_READER=y")
    not_private = private_dir_problem(os.lstat(cache.folder)) if os.path.lexists(cache.folder) else None
    if not_private is not None:
        return Check(name, "fail", f"{cache.folder} {not_private}: images are not unpacked there",
                     f"remove it, or {local}")
    parent = os.path.dirname(cache.folder)
    if not os.path.lexists(cache.folder) and not os.access(parent, os.W_OK | os.X_OK):
        return Check(name, "fail", f"{cache.folder} cannot be made ({parent} is not writable or not there): "
                                   "images are not unpacked", local)
    present = read_cache.entries(cache)
    limit = f"at most {format_size(cache.limit)}"
    detail = (f"{cache.folder}: what containers read of {len(present)} image(s) and layer image(s), "
              f"{format_size(sum(i.size for i in present))} "
              f"({limit}); the files that a container running {read_cache.UNPACK_AFTER:.0f} s reads are kept there, "
              "and later starts read them at the disk's speed")
    concerns, fix = [f"it {problem}"] if problem else [], local
    free, reserve = read_cache.free_and_reserve(cache.folder)
    if free < reserve:
        concerns.append(f"its file system has {format_size(free)} free, less than the tenth "
                        f"({format_size(reserve)}) that an unpack leaves free: no image is unpacked")
        fix = f"make room on that disk, or {local} with room"
    if concerns:
        return Check(name, "warn", f"{detail}; but " + "; and ".join(concerns), fix)
    return Check(name, "ok", detail)


def can_serve_images(settings: Settings) -> bool:
    try:
        squashfs_server(settings.fast_reader)
    except MissingTool:
        return False
    return True


def check_user_cache(settings: Settings) -> Check:
    """The blob cache: the user's own, or shared as docs/import.md shows; any other layout would
    fail some user's import (the importer refuses it with the same words)."""
    name = "HYDRIA_CACHE_PATH"
    layout = cachelayout.inspect(settings.cache_path)
    if layout.problem:
        return Check(name, "fail", layout.problem, layout.hint)
    if not layout.shared:  # the user's own, or to be made
        return check_setting_path(settings, "cache_path")
    if layout.unusable:
        return Check(name, "warn", f"{layout.describe()}: you cannot add to {', '.join(layout.unusable)}; "
                                   "imports use your private cache instead",
                     f"the administrator makes them like the cache: chmod {layout.folder_mode:04o} "
                     f"({cachelayout.GUIDE})")
    return Check(name, "ok", layout.describe())


def check_image_store(settings: Settings) -> Check:
    """The image store (docs/store.md): one that others could change is not used."""
    from hydria.image.kept.store import ImageStore

    name = "image store"
    if not settings.store_path:
        return Check(name, "skip", "none (HYDRIA_STORE_PATH)")
    try:
        store = ImageStore(settings.store_path, settings.store_owner)
        store.check()
    except HydriaError as e:
        return Check(name, "fail", f"not used: {e.message}", e.hint or "")
    owner = user_name(store.owner_uid)
    problem = _store_import_problem(store.owner_uid)
    if problem is not None:
        return Check(name, "fail", f"{store.root}: {owner} cannot import into it: {problem[0]}", problem[1])
    if not os.access(store.images, os.R_OK):
        return Check(name, "ok", f"{store.root}, written by {owner} only")
    images = store.kept_images()
    size = store.size_on_disk()
    detail = f"{store.root}, written by {owner} only: {len(images)} image(s), {format_size(size)}"
    if settings.store_prune_above and size > settings.store_prune_above:
        return Check(name, "warn", f"{detail}, more than HYDRIA_STORE_PRUNE_ABOVE",
                     f"as {owner}: hydria store prune (images used within a day stay)")
    return Check(name, "ok", detail)


def _store_import_problem(owner_uid: int) -> tuple[str, str] | None:
    """Why the store's owner could not import (the Slurm plugin has it import a step's image):
    ``hydria store check`` as the owner, from root as the plugin runs it; None when it could, or
    when this user can not tell (neither root nor the owner)."""
    if os.geteuid() not in (0, owner_uid) or (os.geteuid() != owner_uid and shutil.which("runuser") is None):
        return None
    command = [*hydria_command(), "store", "check"]
    if os.geteuid() != owner_uid:
        command = ["runuser", "-u", user_name(owner_uid), "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    message = next((line[len("[ERROR] "):] for line in lines if line.startswith("[ERROR] ")),
                   lines[0] if lines else f"exit status {result.returncode}")
    hint = next((line[len("[INFO] hint: "):] for line in lines if line.startswith("[INFO] hint: ")), "")
    return message, hint or f"run it to see why: sudo -u {user_name(owner_uid)} hydria store check"


def check_image_policy(settings: Settings) -> Check:
    """The site's image policy (image/policy.py): which images may enter, or why no import can run."""
    from hydria.errors import ConfigError
    from hydria.image.trust import policy

    name = "image policy"
    try:
        found = policy.configured(settings)
    except ConfigError as e:
        return Check(name, "fail", f"{e.message}: every import refuses to run", e.hint or "")
    if found is None:
        return Check(name, "skip", f"no {policy.FILE_NAME} in {settings.sysconf_path}: every image may enter")
    scopes = sum(len(rules) for rules in found.transports.values())
    return Check(name, "ok", f"{found.path}: {scopes} scope(s), default {', '.join(r.kind for r in found.default.requirements)}")
