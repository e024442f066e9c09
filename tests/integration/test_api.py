"""The Python API (hydria/api.py) as a workflow tool uses it: a script run by the unprivileged
test user with this Python, against the local registry."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from testbed.publish import PublishedImage
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

SCRIPT = """
import json, sys
import hydria
from hydria import api
from hydria.errors import HydriaError

uri, out = sys.argv[1], sys.argv[2]
image = hydria.import_image(uri, f"{out}/bb.sqsh")
home = hydria.create(image, name="app")
ran = hydria.start("app", ["sh", "-c", "echo in $(grep ^ID= /etc/os-release); exit 3"], capture_output=True)
written = hydria.start("app", ["sh", "-c", "echo kept > /kept"], rw=True, env=["A=1"])
exported = hydria.export("app", f"{out}/app.sqsh")
listed = hydria.containers()
hydria.remove("app")
try:
    hydria.create(f"{out}/missing.sqsh")
    error = None
except HydriaError as e:
    error = e.message
report = api.doctor()
print(json.dumps({"image": str(image), "home": str(home), "stdout": ran.stdout, "status": ran.returncode,
                  "written": written.returncode, "exported": str(exported), "listed": listed,
                  "after": hydria.containers(), "error": error, "doctor_ok": report.ok,
                  "kept": hydria.start(exported, ["cat", "/kept"], capture_output=True).stdout}))
"""


def test_a_workflow_through_the_api(workspace: Workspace, busybox: PublishedImage) -> None:
    script = workspace.out / "flow.py"
    script.write_text(SCRIPT)
    result = run_as(workspace.user, [sys.executable, str(script), busybox.docker_uri, str(workspace.out)],
                    env=workspace.env(), cwd=workspace.out)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["image"] == str(workspace.out / "bb.sqsh") and Path(found["image"]).is_file()
    assert found["home"] == str(workspace.root / "data" / "app")
    assert found["stdout"] == "in ID=hydria-busybox\n" and found["status"] == 3
    assert found["written"] == 0 and found["kept"] == "kept\n"
    assert found["listed"] == ["app"] and found["after"] == []
    assert found["error"] == f"No such file or directory: {workspace.out / 'missing.sqsh'}"
    assert found["doctor_ok"] is True
