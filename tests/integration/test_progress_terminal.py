"""The import's progress display in a real terminal (tmux), at 44 and 120 columns: driven with a
registry that sends the layer slowly, read back with capture-pane while it runs and at the end."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.stallproxy import StallProxy
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration
DIGEST_LINE = re.compile(r"^[0-9a-f]{12}  ")
DISPLAY_STARTS = ("Downloading ", "Downloaded ", "Squashing: ", "Squashed ")


def screen(session: str) -> list[str]:
    out = subprocess.run(["tmux", "-L", "hydria-test", "capture-pane", "-p", "-t", session],
                         capture_output=True, text=True, check=True).stdout
    return [line.rstrip() for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("columns", [44, 120])
def test_progress_in_a_real_terminal(columns: int, busybox: PublishedImage, registry: Registry,
                                     workspace: Workspace, tmp_path: Path) -> None:
    session = f"progress{columns}"
    done = tmp_path / "done"
    with StallProxy(registry.address, "blob-trickle", rate=256 << 10) as front:
        uri = busybox.docker_uri.replace(registry.address, front.address)
        environment = " ".join(f"{k}={shlex.quote(v)}" for k, v in workspace.env().items())
        command = (f"cd {workspace.out} && runuser -u {workspace.user.name} -- env TERM=xterm {environment} "
                   f"{workspace.hydria} import -o image.sqsh {uri}; touch {done}; sleep 60")
        subprocess.run(["tmux", "-L", "hydria-test", "new-session", "-d", "-x", str(columns), "-y", "30",
                        "-s", session, command], check=True)
        try:
            seen: list[list[str]] = []
            deadline = time.monotonic() + 120
            while not done.exists() and time.monotonic() < deadline:
                seen.append(screen(session))
                time.sleep(0.2)
            final = screen(session)
        finally:
            subprocess.run(["tmux", "-L", "hydria-test", "kill-session", "-t", session], check=False)
    assert done.exists() and (workspace.out / "image.sqsh").exists()
    for lines in [*seen, final]:  # the display never wraps, and nothing is garbled: every line is
        for before, line in zip(["$ ", *lines], lines):  # the display's, a log line, or the rest of a long log line
            if DIGEST_LINE.match(line) or line.startswith(DISPLAY_STARTS):
                assert len(line) < columns, lines
            else:
                assert line.startswith("[INFO] ") or len(before) == columns, lines
    assert any(line.startswith("Downloading ") for lines in seen for line in lines)  # the total, live
    assert any(line.startswith("Squash") for lines in seen for line in lines) or \
        any(line.startswith("Squashed ") for line in final)
    assert sum(line.startswith("Downloaded 1/1") for line in final) == 1  # drawn once; the layer, not the config
    assert any(line.startswith("Squashed ") for line in final)
    assert any(line.startswith("[INFO] Image written to") for line in final)
    blob_lines = [line for line in final if DIGEST_LINE.match(line)]
    assert len(blob_lines) == 1 and all(line[12:].startswith("  done  ") for line in blob_lines)
    assert any(re.match(r"^[0-9a-f]{12}  [0-9]+%", line) for lines in seen for line in lines)  # how far, live
