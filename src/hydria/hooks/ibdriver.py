"""``MELLANOX_MOUNT_DRIVER`` of the InfiniBand hook (enroot's ``99-mellanox.sh``): the node's verbs
provider libraries inside the container, for images whose rdma-core is older than the node's
devices need, or that have none.

For each provider (mlx4, mlx5) of the selected devices:

* its config ``MELLANOX_CONFIG_DIR/<provider>.driver`` (default ``/etc/libibverbs.d``) names the
  driver: ``driver mlx5`` is ``MELLANOX_PROVIDER_DIR/libmlx5``, an absolute name is taken as is;
* the newest ``<driver>-*.so`` (``libmlx5-rdmav34.so``) and the libraries it links to, glibc's own
  excepted, are bound read-only into a directory of their own in the container, with
  ``<name>.so`` links for linking against them;
* the container's provider config is covered by one naming that directory, an
  ``/etc/ld.so.conf.d/00-mellanox.conf`` entry (and an ``/etc/ld.so.conf`` including it, when the
  image has none) adds it to the loader's path, and the image's ldconfig refreshes its cache.

``MELLANOX_PROVIDER_DIR`` defaults to where the node's distribution keeps providers
(``/usr/lib/<arch>-linux-gnu/libibverbs`` on Debian and Ubuntu, ``/usr/lib64/libibverbs``
elsewhere); enroot guesses it from the image's distribution instead, which misses for a Debian
image on a Red Hat node. The container's directory is ``/usr/local/lib/<arch>-linux-gnu/mellanox``
in Debian-like images and ``/usr/local/lib64/mellanox`` in others, as with enroot. The settings
are the host's, or the container's where the host leaves them unset.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping

from hydria.errors import HydriaError
from hydria.log import Logger
from hydria.runtime.edits import Edits, Link, StartContext
from hydria.runtime.fstab import READ_ONLY_FILE_BIND, MountEntry
from hydria.runtime.mounts import resolve_in_root
from hydria.tools import run_tool

log = Logger(__name__)

GLIBC = frozenset({"libc", "libpthread", "libdl", "libm", "librt", "linux-vdso"})
CONFIG_BIND = (*READ_ONLY_FILE_BIND, "noexec")
ORIGIN = "infiniband hook"


def wanted(host: Mapping[str, str], container: Mapping[str, str]) -> bool:
    return bool(_setting("MELLANOX_MOUNT_DRIVER", host, container))


def edits(providers: Iterable[str], context: StartContext) -> Edits:
    """Make the providers' host libraries the ones the container's libibverbs loads (the config
    files it needs are written in the start's private area).

    Raises:
        HydriaError: a provider's config or driver is missing on the node.
    """
    root, area, host, container = context.root, context.area, context.host, context.container
    machine = os.uname().machine
    config_dir = _setting("MELLANOX_CONFIG_DIR", host, container) or "/etc/libibverbs.d"
    provider_dir = _setting("MELLANOX_PROVIDER_DIR", host, container) or (
        f"/usr/lib/{machine}-linux-gnu/libibverbs" if os.path.exists("/etc/debian_version") else "/usr/lib64/libibverbs")
    debian_like = os.path.exists(resolve_in_root(root, "/etc/debian_version"))
    library_dir = f"/usr/local/lib/{machine}-linux-gnu/mellanox" if debian_like else "/usr/local/lib64/mellanox"
    mounts: dict[str, MountEntry] = {}  # by target: providers share their dependencies
    links: dict[str, str] = {}
    for provider in sorted(set(providers)):
        prefix = _driver_prefix(config_dir, provider, provider_dir)
        driver = _newest(prefix, provider)
        config = _write(area, f"{provider}.driver", f"driver {library_dir}/{os.path.basename(prefix)}\n")
        target = f"{config_dir}/{provider}.driver"
        mounts[target] = MountEntry(config, target, "none", CONFIG_BIND, origin=ORIGIN)
        for soname, path in [(os.path.basename(driver), driver), *_dependencies(driver)]:
            target = f"{library_dir}/{soname}"
            mounts[target] = MountEntry(os.path.realpath(path), target, "none", READ_ONLY_FILE_BIND, origin=ORIGIN)
            if soname != os.path.basename(driver):
                links[f"{library_dir}/{soname.split('.so')[0]}.so"] = soname
    conf = _write(area, "00-mellanox.conf", f"{library_dir}\n")
    mounts["/etc/ld.so.conf.d/00-mellanox.conf"] = MountEntry(conf, "/etc/ld.so.conf.d/00-mellanox.conf", "none",
                                                              CONFIG_BIND, origin=ORIGIN)
    existing = resolve_in_root(root, "/etc/ld.so.conf")
    if not os.path.isfile(existing) or os.path.getsize(existing) == 0:
        loader_conf = _write(area, "ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
        mounts["/etc/ld.so.conf"] = MountEntry(loader_conf, "/etc/ld.so.conf", "none", CONFIG_BIND, origin=ORIGIN)
    return Edits(mounts=tuple(mounts.values()), links=tuple(Link(path, target, ORIGIN) for path, target in links.items()),
                 libraries=("the InfiniBand provider libraries",))


def _setting(name: str, host: Mapping[str, str], container: Mapping[str, str]) -> str:
    return host.get(name, container.get(name, ""))


def _driver_prefix(config_dir: str, provider: str, provider_dir: str) -> str:
    """The driver's path without its ``-rdmavN.so`` suffix, from the provider's config."""
    path = os.path.join(config_dir, f"{provider}.driver")
    try:
        with open(path) as handle:
            words = handle.readline().split()
    except OSError:
        raise HydriaError(f"Provider config not found: {path}",
                          hint="install the node's rdma-core provider package (ibverbs-providers, libibverbs), "
                               "or set MELLANOX_CONFIG_DIR") from None
    if len(words) < 2 or words[0] != "driver":
        raise HydriaError(f"Could not parse provider config: {path}", hint="it should read: driver NAME")
    name = words[1]
    return name if name.startswith("/") else os.path.join(provider_dir, f"lib{name}")


def _newest(prefix: str, provider: str) -> str:
    """The driver for the newest provider ABI (``libmlx5-rdmav34.so``)."""
    found = sorted(glob.glob(f"{glob.escape(prefix)}-*.so"))
    if not found:
        raise HydriaError(f"Provider driver not found: {provider} ({prefix}-*.so)",
                          hint="set MELLANOX_PROVIDER_DIR to the directory of the node's verbs providers")
    return found[-1]


def _dependencies(library: str) -> list[tuple[str, str]]:
    """(soname, path) of what ``library`` links to on the host, glibc's own libraries excepted."""
    found = []
    for line in run_tool(["ldd", library], f"cannot list the libraries {library} needs").splitlines():
        words = line.split()
        if len(words) < 3 or words[1] != "=>":
            continue  # the vDSO and the loader itself
        soname, path = words[0], words[2]
        if soname.split(".so")[0] in GLIBC or soname.startswith("ld-linux"):
            continue
        if not path.startswith("/"):
            log.warning("%s needs %s, which this node lacks", library, soname)
            continue
        found.append((soname, path))
    return found


def _write(area: str, name: str, content: str) -> str:
    path = os.path.join(area, name)
    with open(path, "w") as handle:
        handle.write(content)
    return path
