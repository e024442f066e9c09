"""pyxis's importer plugin protocol (plugstack ``importer=PATH``): an admin's program, not hydria's
built-in import, turns a step's registry image into a squashfs file (a site cache, a mirror, a
pre-built image store).

* ``IMPORTER get URI``: stdin /dev/null; the first line of its stdout is the absolute path of the
  squashfs; what it said on stderr ends the error when it fails (``importer get failed with exit code N``,
  ``... terminated with signal N``, ``importer did not return a squashfs path``).
* ``IMPORTER release``: idempotent; called after a named container was created from the file, and
  again when the step ends. A failing release is only logged.

It runs as the job's user with the job's environment plus ``PYXIS_RUNTIME_PATH`` (the plugstack's
``runtime_path``, where the per-user directory ``UID/`` is made by the plugin) and
``SLURM_JOB_UID``/``SLURM_JOB_GID``, so pyxis's example importers run unchanged.
"""

from __future__ import annotations

import os

from hydria.errors import HydriaError
from hydria.log import Logger
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

log = Logger(__name__)


def get(importer: str, uri: str, runtime_path: str) -> str:
    """Raises HydriaError when the importer fails or names no file."""
    from hydria.tools import SAID_LIMIT

    result = _run([importer, "get", uri], runtime_path)
    said = f": {result.stderr.strip()[-SAID_LIMIT:]}" if result.stderr.strip() else ""
    if result.returncode < 0:
        raise HydriaError(f"importer get terminated with signal {-result.returncode}{said}")
    if result.returncode != 0:
        raise HydriaError(f"importer get failed with exit code {result.returncode}{said}")
    path = (result.stdout.splitlines() or [""])[0].strip()
    if not path.startswith("/"):
        raise HydriaError(f"importer did not return a squashfs path{said}")
    return path


def release(importer: str, runtime_path: str) -> None:
    result = _run([importer, "release"], runtime_path)
    if result.returncode != 0:
        log.warning("importer release failed with exit code %d: %s", result.returncode, result.stderr.strip())


def _run(argv: list[str], runtime_path: str) -> subprocess.CompletedProcess[str]:
    import subprocess  # here: steps without an importer plugin spare its import

    environment = {**os.environ, "PYXIS_RUNTIME_PATH": runtime_path, "SLURM_JOB_UID": str(os.getuid()),
                   "SLURM_JOB_GID": str(os.getgid())}
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=environment,
                          check=False)
