"""``hydria start --device`` with CDI specs (docs/devices.md), as the unprivileged test user: the
devices are ones every machine has (/dev/null, /dev/zero), the "driver" files a test tree, and the
vendor's hook a script in the test tree that does what ``nvidia-cdi-hook create-symlinks`` does
(the real one needs NVIDIA's toolkit: proven with a GPU by scripts/gpu-proof.sh where one is lent).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import cdi
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

# create-symlinks as NVIDIA's hook does it: the OCI state on stdin names the bundle, whose
# config.json names the root filesystem; each --link TARGET::LINK is made in it.
VENDOR_HOOK = """#!/bin/sh
set -e
bundle=$(sed -n 's/.*"bundle": "\\([^"]*\\)".*/\\1/p')
root=$(sed -n 's/.*"root": {"path": "\\([^"]*\\)".*/\\1/p' "$bundle/config.json")
[ "$1" = create-symlinks ] || exit 3
shift
while [ $# -gt 1 ]; do
    [ "$1" = --link ] || exit 4
    mkdir -p "$root$(dirname "${2#*::}")"
    ln -s "${2%%::*}" "$root${2#*::}"
    shift 2
done
"""


@pytest.fixture
def vendor(workspace: Workspace) -> Iterator[Path]:
    """A folder every user can read: specs/, the vendor's hook and its "driver" library."""
    folder = Path(tempfile.mkdtemp(prefix="hydria-cdi-"))
    (folder / "specs").mkdir()
    (folder / "lib").mkdir()
    (folder / "lib" / "libvendor.so.1.2").write_text("the vendor's library\n")
    hook = folder / "vendor-hook"
    hook.write_text(VENDOR_HOOK)
    hook.chmod(0o755)
    for path in (folder, folder / "specs", folder / "lib"):
        path.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def nvidia_spec(vendor: Path) -> str:
    """A spec in the form NVIDIA's generator writes, for devices this machine has."""
    library = vendor / "lib" / "libvendor.so.1.2"
    return cdi.nvidia_form(common_nodes=["/dev/zero"], libraries=[str(library)],
                           hooks=[(str(vendor / "vendor-hook"), ["nvidia-cdi-hook", "create-symlinks", "--link",
                                                                 f"libvendor.so.1.2::{library.parent}/libvendor.so.1"])],
                           devices={"0": ["/dev/null"], "all": ["/dev/null"]})


def test_a_device_in_nvidias_form(vendor: Path, workspace: Workspace, images: dict[str, Path]) -> None:
    (vendor / "specs" / "nvidia.yaml").write_text(nvidia_spec(vendor))
    library = vendor / "lib" / "libvendor.so.1"
    result = workspace.run("start", "--device", "nvidia.com/gpu=all", str(images["busybox"]), "sh", "-c",
                           f"echo $NVIDIA_VISIBLE_DEVICES; readlink {library}; cat {library}; "
                           "test -c /dev/null && test -c /dev/zero && echo nodes",
                           HYDRIA_CDI_SPEC_DIRS=f"/nowhere:{vendor / 'specs'}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["void", "libvendor.so.1.2", "the vendor's library", "nodes"]
    listed = workspace.run("cdi", "list", HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"))
    assert listed.returncode == 0 and listed.stdout.splitlines() == [
        f"nvidia.com/gpu=0  ({vendor / 'specs' / 'nvidia.yaml'})", f"nvidia.com/gpu=all  ({vendor / 'specs' / 'nvidia.yaml'})"]


def test_device_nodes_under_their_own_names_environment_and_hooks_in_order(vendor: Path, workspace: Workspace,
                                                                          images: dict[str, Path]) -> None:
    """A node is bound under the spec's name (where the host has none under that name, in a /dev
    of the container's own, as podman does, whether or not HYDRIA_RESTRICT_DEV asks for one); the
    createContainer hook runs before the root filesystem turns read-only, the startContainer hook
    in the container before its program; --env wins over the spec."""
    spec = {"cdiVersion": "0.6.0", "kind": "example.com/fpga", "containerEdits": {"env": ["FPGA_COMMON=1"]},
            "devices": [{"name": "card0", "containerEdits": {
                "env": ["FPGA=card0", "OVERRIDDEN=spec"],
                "deviceNodes": [{"path": "/dev/fpga0", "hostPath": "/dev/zero", "major": 1, "minor": 5}],
                "hooks": [{"hookName": "createContainer", "path": "/bin/sh",
                           "args": ["sh", "-c", "read state; echo \"$state\" > \"$0\"", str(workspace.out / "state.json")]},
                          {"hookName": "startContainer", "path": "/bin/sh",
                           "args": ["sh", "-c", "echo started-in-container > /tmp/hooked"]}]}}]}
    (vendor / "specs" / "fpga.json").write_text(json.dumps(spec))
    result = workspace.run("start", "--env", "OVERRIDDEN=user", "--device", "example.com/fpga=card0",
                           str(images["busybox"]), "sh", "-c",
                           "ls -l /dev/fpga0; echo $FPGA $FPGA_COMMON $OVERRIDDEN; cat /tmp/hooked",
                           HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"), HYDRIA_RESTRICT_DEV="y")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("c") and " 1,   5 " in lines[0] and lines[0].endswith("/dev/fpga0"), lines
    assert lines[1:] == ["card0 1 user", "started-in-container"]
    state = json.loads((workspace.out / "state.json").read_text())
    assert state["status"] == "created" and state["bundle"].endswith("/bundle")
    unasked = workspace.run("start", "--device", "example.com/fpga=card0", str(images["busybox"]), "sh", "-c",
                            "ls -l /dev/fpga0; test -c /dev/null && test -c /dev/urandom && echo usual-nodes",
                            HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"))
    assert unasked.returncode == 0, unasked.stderr
    [node, usual] = unasked.stdout.splitlines()
    assert node.startswith("c") and " 1,   5 " in node and node.endswith("/dev/fpga0") and usual == "usual-nodes"


# What nvidia-cdi-hook update-ldcache and disable-device-node-modification need: namespaces of the
# hook's own and a bind mount in the container's root (an OCI runtime runs hooks with its privileges).
PRIVILEGED_HOOK = """#!/bin/sh
set -e
bundle=$(sed -n 's/.*"bundle": "\\([^"]*\\)".*/\\1/p')
root=$(sed -n 's/.*"root": {"path": "\\([^"]*\\)".*/\\1/p' "$bundle/config.json")
/usr/bin/unshare --mount --uts --ipc --net --pid --fork /bin/true
echo "the vendor's params" > "$bundle/params"
touch "$root/etc/vendor-params"
/bin/mount --bind "$bundle/params" "$root/etc/vendor-params"
"""


def test_hooks_run_with_the_capabilities_of_the_containers_user_namespace(vendor: Path, workspace: Workspace,
                                                                          images: dict[str, Path]) -> None:
    hook = vendor / "privileged-hook"
    hook.write_text(PRIVILEGED_HOOK)
    hook.chmod(0o755)
    spec = {"cdiVersion": "0.6.0", "kind": "example.com/gpu", "devices": [{"name": "0", "containerEdits": {
        "hooks": [{"hookName": "createContainer", "path": str(hook)}]}}]}
    (vendor / "specs" / "gpu.json").write_text(json.dumps(spec))
    result = workspace.run("start", "--device", "example.com/gpu=0", str(images["busybox"]), "sh", "-c",
                           "cat /etc/vendor-params; grep -c CapEff:.0000000000000000 /proc/self/status",
                           HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["the vendor's params", "1"]  # the program itself has none


@pytest.mark.parametrize(("edits", "device", "message"), [
    ({"hooks": [{"hookName": "createContainer", "path": "/bin/sh", "args": ["sh", "-c", "echo broken >&2; exit 3"]}]},
     "example.com/x=a", "the createContainer hook sh -c echo broken >&2; exit 3 ("),
    ({"hooks": [{"hookName": "createContainer", "path": "/nonexistent/hook"}]},
     "example.com/x=a", "cannot run the createContainer hook /nonexistent/hook ("),
    ({"hooks": [{"hookName": "createContainer", "path": "/bin/sleep", "args": ["sleep", "30"], "timeout": 1}]},
     "example.com/x=a", "did not end within 1 s"),
    ({"deviceNodes": [{"path": "/dev/x-missing"}]}, "example.com/x=a", "device node /dev/x-missing: No such file"),
    ({"deviceNodes": [{"path": "/dev/null", "major": 9}]}, "example.com/x=a", "/dev/null is device 1:3, the spec says 9:3"),
    ({"mounts": [{"hostPath": "/nonexistent/lib.so", "containerPath": "/lib.so", "options": ["bind"]}]},
     "example.com/x=a", "/nonexistent/lib.so"),
    ({}, "example.com/x=b", "no such CDI device: example.com/x=b"),
])
def test_a_device_that_cannot_be_given_stops_the_start_saying_why(edits: dict[str, object], device: str,
                                                                   message: str, vendor: Path,
                                                                   workspace: Workspace,
                                                                   images: dict[str, Path]) -> None:
    spec = {"cdiVersion": "0.6.0", "kind": "example.com/x", "devices": [{"name": "a", "containerEdits": edits}]}
    (vendor / "specs" / "x.json").write_text(json.dumps(spec))
    result = workspace.run("start", "--device", device, str(images["busybox"]), "echo", "ran",
                           HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"), timeout=60)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "[INFO] hint: " in result.stderr


def test_cdi_list_says_which_specs_are_left_out(vendor: Path, workspace: Workspace) -> None:
    (vendor / "specs" / "broken.json").write_text('{"cdiVersion": "0.6.0", "kind": "nokind"}')
    listed = workspace.run("cdi", "list", HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"))
    assert listed.returncode == 1
    assert f"left out: {vendor / 'specs' / 'broken.json'}: kind 'nokind' is not VENDOR/CLASS" in listed.stdout
    (vendor / "specs").chmod(0o777)  # anyone could plant a spec, whose hooks would run as this user
    listed = workspace.run("cdi", "list", HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs"))
    assert f"left out: {vendor / 'specs' / 'broken.json'}: {vendor / 'specs'} can be changed by others" in listed.stdout
    report = json.loads(workspace.run("cdi", "list", "--json", HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs")).stdout)
    assert report["devices"] == [] and list(report["invalid"]) == [str(vendor / "specs" / "broken.json")]


def test_doctor_shows_the_devices_and_the_specs_left_out(vendor: Path, workspace: Workspace) -> None:
    def check() -> dict[str, str]:
        report = json.loads(workspace.run("doctor", "--json", HYDRIA_CDI_SPEC_DIRS=str(vendor / "specs")).stdout)
        return next(c for c in report["checks"] if c["name"] == "cdi devices")

    assert check()["status"] == "skip"
    (vendor / "specs" / "nvidia.yaml").write_text(nvidia_spec(vendor))
    assert check() == {"name": "cdi devices", "status": "ok", "fix": "",
                       "detail": "2 device(s) of nvidia.com/gpu: --device nvidia.com/gpu=0"}
    (vendor / "specs" / "broken.json").write_text("{")
    failed = check()
    assert failed["status"] == "fail" and "broken.json: not valid JSON" in failed["detail"], failed
