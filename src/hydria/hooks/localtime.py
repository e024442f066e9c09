"""The host's time zone in the container (the built-in equivalent of enroot's 10-localtime hook)."""

from __future__ import annotations

import os

from hydria.errors import HydriaError
from hydria.runtime.mounts import resolve_in_root


def copy_localtime(root: str, host_localtime: str = "/etc/localtime") -> None:
    """When the host's /etc/localtime is a symlink, the link and the zone file it names are copied into the root
    filesystem at the same paths. Copied, not bound, so that the image can still install tzdata."""
    try:
        link = os.readlink(host_localtime)
    except OSError:
        return  # not a symlink (or none): the image keeps its own
    zone = os.path.realpath(host_localtime)
    named = os.path.normpath(os.path.join("/etc", link))  # where the link leads from /etc/localtime
    if not os.path.isfile(zone) or not os.path.isdir(os.path.join(root, "etc")):
        return
    try:
        inside = resolve_in_root(root, named)
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        with open(zone, "rb") as source, open(inside, "wb") as copy:  # a few KB: no shutil import
            copy.write(source.read())
        localtime = os.path.join(resolve_in_root(root, "/etc"), "localtime")
        if os.path.lexists(localtime):
            os.unlink(localtime)
        os.symlink(link, localtime)
    except (OSError, HydriaError):
        return  # a read-only unpacked root, or a zone path the image makes odd: keep the image's
