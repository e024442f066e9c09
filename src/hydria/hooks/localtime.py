"""The host's time zone in the container (the built-in equivalent of enroot's 10-localtime hook)."""

from __future__ import annotations

import os

from hydria.runtime.edits import Edits, File, Link, StartContext

ORIGIN = "hydria's localtime hook"


def edits(context: StartContext, host_localtime: str = "/etc/localtime") -> Edits:
    """When the host's /etc/localtime is a symlink, the link and the zone file it names, at the
    same paths in the root (an image without /etc gets neither). Copied, not bound, so that the
    image can still install tzdata."""
    try:
        link = os.readlink(host_localtime)
        with open(os.path.realpath(host_localtime), "rb") as zone:  # a few KB
            content = zone.read()
    except OSError:
        return Edits()  # not a symlink (or none): the image keeps its own
    if not os.path.isdir(os.path.join(context.root, "etc")):
        return Edits()
    named = os.path.normpath(os.path.join("/etc", link))  # where the link leads from /etc/localtime
    return Edits(files=(File(named, content, ORIGIN),), links=(Link("/etc/localtime", link, ORIGIN, optional=True),))
