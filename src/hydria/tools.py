"""Running the field's own tools (mksquashfs, unsquashfs, gcc, ldd, sbcast, podman, ...) one way:
standard input closed, output captured, and a failure that says what was being done and ends with
what the tool said. Imported only where a tool runs (``subprocess`` is not on the start path)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from hydria.errors import HydriaError, MissingTool

SAID_LIMIT = 2000  # characters of a tool's own words kept in an error


class ToolFailed(HydriaError):
    """A tool could not start, or exited with a failure status."""


def run_tool(argv: Sequence[str], what: str, *, env: Mapping[str, str] | None = None,
             hint: str | None = None, pass_fds: tuple[int, ...] = ()) -> str:
    """Run ``argv`` (which inherits ``pass_fds``) and return its standard output.

    Raises:
        MissingTool: the program is not installed.
        ToolFailed: ``WHAT: `` and the end of the tool's standard error (its standard output, or
            its exit status, when that is empty).
    """
    try:
        result = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                env=dict(env) if env is not None else None, check=False, pass_fds=pass_fds)
    except FileNotFoundError:
        raise MissingTool(argv[0], hint=hint) from None
    if result.returncode != 0:
        said = result.stderr.strip() or result.stdout.strip() or f"exit status {result.returncode}"
        raise ToolFailed(f"{what}: {said[-SAID_LIMIT:]}", hint=hint)
    return result.stdout
