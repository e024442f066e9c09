"""An image's runtime config (Entrypoint, Cmd, Env, WorkingDir, Volumes, Labels) as the files the
runtime reads: ``/etc/rc``, ``/etc/rc.local``, ``/etc/environment`` and ``/etc/fstab``. Pure.

This is enroot's image format, so images made by either tool start the same way:

* ``/etc/rc`` changes to WORKDIR, sources ``/etc/rc.local`` when it is not empty, then runs
  ``ENTRYPOINT "$@"`` when a command was given, else ``ENTRYPOINT CMD``; with neither, ``/bin/sh``;
* ``/etc/environment`` holds ``Env``, one ``NAME=value`` per line;
* ``/etc/fstab`` makes each ``Volume`` a writable self-bind.

The config is untrusted (docs/security.md): a value of the wrong type or with a NUL byte is
refused, and no value can change the structure of the file it lands in: words are shell-quoted,
line breaks become spaces in comments and environment lines, and a volume's path is written with
fstab's octal escapes.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from hydria.errors import HydriaError
from hydria.record import Record

PROVENANCE = "# hydria-provenance:"  # the reference, as enroot's "# enroot-provenance:"
DIGEST = "# hydria-digest:"  # the manifest's digest, which pins the config and every layer
# Besides what is not printable: what fstab parsing would take for an escape, a substitution or a comment.
_FSTAB_ESCAPED = frozenset("\\$#")
_CRAFTED = "the image was built wrongly or crafted; nothing was written"


class ImageConfigInvalid(HydriaError):
    """An image config field of the wrong type, or with a value no runtime file can hold."""


class RuntimeFiles(Record):
    """The generated files, path (relative to the root) to content."""

    rc: str
    rc_local: str
    environment: str
    fstab: str
    directories: tuple[str, ...]  # WORKDIR and the VOLUMEs, which the image must hold

    def files(self) -> dict[str, str]:
        return {"etc/rc": self.rc, "etc/rc.local": self.rc_local,
                "etc/environment": self.environment, "etc/fstab": self.fstab}


def runtime_files(config: object, uri: str, digest: str | None = None) -> RuntimeFiles:
    """Build the runtime files from the ``config`` object of an image config blob, the image's
    provenance first: ``uri`` and, where a manifest names the image, its ``digest``.

    Raises:
        ImageConfigInvalid: a field has the wrong type or holds a NUL byte or an unusable volume.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise _invalid("config", "an object", config)
    entrypoint = _words(config, "Entrypoint")
    cmd = _words(config, "Cmd")
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    workdir = _string(config, "WorkingDir") or "/"
    labels = _mapping(config, "Labels")
    lines = [f"{PROVENANCE} {_one_line(uri)}", *([f"{DIGEST} {_one_line(digest)}"] if digest else [])]
    lines += [f"# {_one_line(key)} {_one_line(_text('Labels', value))}" for key, value in sorted(labels.items())]
    quoted_workdir = shlex.quote(workdir)
    run_with_args = shlex.join(entrypoint) + ' "$@"' if entrypoint else '"$@"'
    lines += [
        # enroot's mkdir, but only when needed: the import puts WORKDIR in the image, and a
        # fork and exec of mkdir through a fresh FUSE mount cost every start (docs/runtime.md)
        f"[ -d {quoted_workdir} ] || mkdir -p {quoted_workdir} 2> /dev/null",
        f"cd {quoted_workdir} && unset OLDPWD || exit 1",
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f"    exec {run_with_args}",
        "else",
        f"    exec {shlex.join([*entrypoint, *cmd])}",
        "fi",
    ]
    environment = "".join(f"{_one_line(entry)}\n" for entry in _words(config, "Env") if "=" in entry)
    volumes = _volumes(_mapping(config, "Volumes"))
    fstab = "".join(
        f"${{HYDRIA_ROOTFS}}{path} {path} none x-create=dir,bind,rw,nosuid,nodev\n"
        for path in map(_fstab_field, volumes)
    )
    return RuntimeFiles(
        rc="\n".join(lines) + "\n",
        rc_local="# Sourced by /etc/rc before the container command runs.\n",
        environment=environment,
        fstab=fstab,
        directories=(workdir, *volumes),
    )


def _invalid(field: str, expected: str, value: object) -> ImageConfigInvalid:
    return ImageConfigInvalid(f"Invalid image config: {field} must be {expected}, not {type(value).__name__}",
                              hint=_CRAFTED)


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise _invalid(field, "text", value)
    if "\0" in value:
        raise ImageConfigInvalid(f"Invalid image config: {field} holds a NUL byte",
                                 hint=_CRAFTED)
    return value


def _string(config: Mapping[str, Any], field: str) -> str:
    value = config.get(field)
    return "" if value is None else _text(field, value)


def _words(config: Mapping[str, Any], field: str) -> list[str]:
    """A string or a list of strings (Docker accepts both for Entrypoint and Cmd)."""
    value = config.get(field)
    if value is None:
        return []
    if isinstance(value, str):
        return [_text(field, value)]
    if not isinstance(value, list):
        raise _invalid(field, "a list of strings", value)
    return [_text(field, word) for word in value]


def _mapping(config: Mapping[str, Any], field: str) -> dict[str, Any]:
    value = config.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(field, "an object", value)
    for key in value:
        _text(field, key)
    return value


def _volumes(volumes: Mapping[str, Any]) -> list[str]:
    """The absolute volume paths, normalised (``..`` cannot climb above ``/``), without ``/``."""
    paths = {"/" + posixpath.normpath(volume).lstrip("/") for volume in volumes if volume.startswith("/")}
    return sorted(paths - {"/"})


def _fstab_field(path: str) -> str:
    """``path`` as one fstab field: spaces, line breaks and other characters that are not
    printable, ``\\``, ``$`` and ``#`` as ``\\ooo``.

    Raises:
        ImageConfigInvalid: such a character beyond octal 377, which has no escape.
    """
    pieces = []
    for char in path:
        special = char in _FSTAB_ESCAPED or char.isspace() or not char.isprintable()
        if special and ord(char) <= 0o377:
            pieces.append(f"\\{ord(char):03o}")
        elif special:
            raise ImageConfigInvalid(f"Invalid image config: the volume {path!r} holds {char!r}, "
                                     "which /etc/fstab cannot hold",
                                     hint=_CRAFTED)
        else:
            pieces.append(char)
    return "".join(pieces)


def _one_line(text: str) -> str:
    """``text`` on one line: every line break Python's ``splitlines`` knows becomes a space."""
    return " ".join(text.splitlines()) if text else text
