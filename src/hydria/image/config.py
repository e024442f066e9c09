"""An image's runtime config (Entrypoint, Cmd, Env, WorkingDir, Volumes, Labels) as the files the
runtime reads: ``/etc/rc``, ``/etc/rc.local``, ``/etc/environment`` and ``/etc/fstab``. Pure.

This is enroot's image format, so images made by either tool start the same way:

* ``/etc/rc`` changes to WORKDIR, sources ``/etc/rc.local`` when it is not empty, then runs
  ``ENTRYPOINT "$@"`` when a command was given, else ``ENTRYPOINT CMD``; with neither, ``/bin/sh``;
* ``/etc/environment`` holds ``Env``, one ``NAME=value`` per line;
* ``/etc/fstab`` makes each ``Volume`` a writable self-bind.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PROVENANCE = "# hydria-provenance:"


@dataclass(frozen=True)
class RuntimeFiles:
    """The generated files, path (relative to the root) to content."""

    rc: str
    rc_local: str
    environment: str
    fstab: str
    workdir: str

    def files(self) -> dict[str, str]:
        return {"etc/rc": self.rc, "etc/rc.local": self.rc_local,
                "etc/environment": self.environment, "etc/fstab": self.fstab}


def runtime_files(config: Mapping[str, Any], uri: str) -> RuntimeFiles:
    """Build the runtime files from the ``config`` object of an image config blob."""
    entrypoint = _words(config.get("Entrypoint"))
    cmd = _words(config.get("Cmd"))
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    workdir = config.get("WorkingDir") or "/"
    labels = config.get("Labels") or {}
    lines = [f"{PROVENANCE} {_one_line(uri)}"]
    lines += [f"# {_one_line(key)} {_one_line(str(value))}" for key, value in sorted(labels.items())]
    quoted_workdir = shlex.quote(workdir)
    run_with_args = shlex.join(entrypoint) + ' "$@"' if entrypoint else '"$@"'
    lines += [
        # enroot's mkdir, but only when needed: the import puts WORKDIR in the image, and a
        # fork and exec of mkdir through a fresh FUSE mount cost ~20 ms of every start
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
    environment = "".join(f"{_one_line(entry)}\n" for entry in config.get("Env") or [] if "=" in entry)
    fstab = "".join(
        f"${{HYDRIA_ROOTFS}}{volume} {volume} none x-create=dir,bind,rw,nosuid,nodev\n"
        for volume in sorted(config.get("Volumes") or {}) if volume.startswith("/") and " " not in volume
    )
    return RuntimeFiles(
        rc="\n".join(lines) + "\n",
        rc_local="# Sourced by /etc/rc before the container command runs.\n",
        environment=environment,
        fstab=fstab,
        workdir=workdir,
    )


def _words(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    return []


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")
