"""[INFO]/[WARN]/[ERROR] are coloured on a terminal (a real pseudo-terminal here), and plain with
NO_COLOR, TERM=dumb, or when standard error is not a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

PROGRAM = "from hydria import log; log.to_stderr(); log.Logger('t').error('broken'); log.Logger('t').info('fix')"


def stderr_of(env: dict[str, str], terminal: bool) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")} | env
    if not terminal:
        return subprocess.run([sys.executable, "-c", PROGRAM], env=environment, capture_output=True,
                              text=True, check=True).stderr
    primary, secondary = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", PROGRAM], env=environment, stderr=secondary, check=True)
        os.close(secondary)
        output = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the other side is closed and all was read
                break
            if not chunk:
                break
            output += chunk
        return output.decode()
    finally:
        os.close(primary)


def test_coloured_on_a_terminal() -> None:
    out = stderr_of({"TERM": "xterm"}, terminal=True)
    assert "\x1b[31m[ERROR]\x1b[0m broken" in out and "\x1b[94m[INFO]\x1b[0m fix" in out


@pytest.mark.parametrize(("env", "terminal"), [({"TERM": "xterm", "NO_COLOR": "1"}, True),
                                               ({"TERM": "dumb"}, True), ({"TERM": "xterm"}, False)])
def test_plain_otherwise(env: dict[str, str], terminal: bool) -> None:
    out = stderr_of(env, terminal)
    assert "[ERROR] broken" in out and "\x1b[" not in out
