"""CDI specs (hooks/cdi.py): read as CDI's schema has them, every field that is wrong named; the
devices of several folders, as CDI's library resolves them; a device asked for becomes edits, or an
error where hydria cannot carry out what its spec asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.hooks.cdi import CdiError, edits_for, load, read_spec, validate
from testbed.cdi import nvidia_form

# The form `nvidia-ctk cdi generate` writes, with this machine's paths.
NVIDIA_YAML = nvidia_form(
    common_nodes=["/dev/nvidia-uvm", "/dev/nvidiactl"],
    hooks=[("/usr/bin/nvidia-cdi-hook", ["nvidia-cdi-hook", "create-symlinks", "--link",
                                         "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"]),
           ("/usr/bin/nvidia-cdi-hook", ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"])],
    libraries=["/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"],
    devices={name: ["/dev/nvidia0"] for name in ("0", "GPU-955ef018-3bd9-5f27-80b3-fa20ee8d19c5", "all")})


def spec(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"cdiVersion": "0.6.0", "kind": "example.com/thing",
                                "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}
    document.update(changes)
    return document


def write(folder: Path, name: str, document: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_nvidias_generated_spec(tmp_path: Path) -> None:
    read = read_spec(str(write(tmp_path, "nvidia.yaml", NVIDIA_YAML)))
    assert read.kind == "nvidia.com/gpu" and sorted(read.devices) == ["0", "GPU-955ef018-3bd9-5f27-80b3-fa20ee8d19c5", "all"]
    registry = load([str(tmp_path)])
    edits = edits_for(["nvidia.com/gpu=0"], registry)
    assert edits.environment == (("NVIDIA_VISIBLE_DEVICES", "void"),)
    assert [node.path for node in edits.devices] == ["/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia0"]
    assert [(hook.stage, hook.args[1]) for hook in edits.hooks] == [("createContainer", "create-symlinks"),
                                                                    ("createContainer", "update-ldcache")]
    [mount] = edits.mounts
    assert mount.target == "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    assert mount.options == ("x-create=file", "ro", "nosuid", "nodev", "bind")
    assert edits_for(["nvidia.com/gpu=all"], registry).devices[-1].path == "/dev/nvidia0"  # the spec's own "all"


@pytest.mark.parametrize(("document", "message"), [
    (spec(cdiVersion=None), "cdiVersion must be a non-empty string"),
    (spec(cdiVersion="2.0.0"), "cdiVersion '2.0.0' is not a version this hydria reads"),
    (spec(kind="thing"), "kind 'thing' is not VENDOR/CLASS"),
    (spec(kind="example.com/a/b"), "is not VENDOR/CLASS"),
    (spec(devices=[]), "devices must be a list of at least one device"),
    (spec(extra=1), "the spec: unknown field 'extra'"),
    (spec(devices=[{"name": "-a"}]), "device name '-a' must start and end with a letter or digit"),
    (spec(devices=[{"name": "a"}, {"name": "a"}]), "device 'a' is defined twice"),
    (spec(containerEdits={"env": ["NOEQUALS"]}), "containerEdits.env: 'NOEQUALS' is not NAME=VALUE"),
    (spec(containerEdits={"deviceNodes": [{"path": "dev/x"}]}), "'dev/x' must be an absolute path"),
    (spec(containerEdits={"deviceNodes": [{"path": "/dev/x", "major": "1"}]}), "major must be an integer"),
    (spec(containerEdits={"mounts": [{"hostPath": "/a"}]}), "containerPath must be a non-empty string"),
    (spec(containerEdits={"hooks": [{"hookName": "later", "path": "/bin/true"}]}), "hookName 'later' is none of"),
    (spec(containerEdits={"hooks": [{"hookName": "createContainer", "path": "/bin/true", "timeout": 0}]}),
     "timeout must be a number of seconds above 0"),
    ([1, 2], "the spec must be a mapping"),
])
def test_an_invalid_spec_names_what_is_wrong(document: object, message: str, tmp_path: Path) -> None:
    with pytest.raises(CdiError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_spec(str(write(tmp_path, "bad.json", document)))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.sampled_from(["cdiVersion", "kind", "devices", "name", "containerEdits",
                                                              "env", "deviceNodes", "mounts", "hooks", "path",
                                                              "hostPath", "containerPath", "hookName", "x"]),
                                             children, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_document_is_a_spec_or_a_cdi_error(document: object) -> None:
    """What a broken generator may write never ends in another exception (a traceback)."""
    try:
        validate(document, "fuzz.json")
    except CdiError:
        pass


def test_a_later_folder_replaces_a_device_and_one_folder_may_not_define_it_twice(tmp_path: Path) -> None:
    write(tmp_path / "etc", "a.json", spec())
    write(tmp_path / "run", "b.json", spec(devices=[{"name": "a", "containerEdits": {"env": ["A=2"]}}]))
    registry = load([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert edits_for(["example.com/thing=a"], registry).environment == (("A", "2"),)
    write(tmp_path / "run", "c.json", spec(devices=[{"name": "a", "containerEdits": {"env": ["A=3"]}}]))
    registry = load([str(tmp_path / "etc"), str(tmp_path / "run")])
    with pytest.raises(CdiError, match="defined by more than one spec of one folder") as raised:
        edits_for(["example.com/thing=a"], registry)
    assert "b.json" in raised.value.message and "c.json" in raised.value.message


def test_a_missing_device_lists_what_there_is_and_the_specs_left_out(tmp_path: Path) -> None:
    write(tmp_path, "good.json", spec())
    write(tmp_path, "broken.yaml", "kind: [")
    registry = load([str(tmp_path), str(tmp_path / "absent")])
    assert list(registry.invalid) == [str(tmp_path / "broken.yaml")]
    with pytest.raises(CdiError, match="no such CDI device") as raised:
        edits_for(["example.com/thing=b"], registry)
    assert raised.value.hint == "this node has example.com/thing=a; hydria cdi list shows them"
    with pytest.raises(CdiError) as raised:
        edits_for(["amd.com/gpu=0"], registry)
    assert "no spec of amd.com/gpu on this node (left out: " in (raised.value.hint or "")
    assert (raised.value.hint or "").count(str(tmp_path / "broken.yaml")) == 1  # each spec named once
    with pytest.raises(CdiError, match="not a CDI device name"):
        edits_for(["gpu0"], registry)


def test_all_is_every_device_of_a_kind_without_one_of_that_name(tmp_path: Path) -> None:
    write(tmp_path, "two.json", spec(containerEdits={"env": ["COMMON=1"]},
                                     devices=[{"name": "a", "containerEdits": {"env": ["A=1"]}},
                                              {"name": "b", "containerEdits": {"env": ["B=1"]}}]))
    edits = edits_for(["example.com/thing=all", "example.com/thing=a"], load([str(tmp_path)]))
    assert edits.environment == (("COMMON", "1"), ("A", "1"), ("B", "1"))  # the spec's edits once


@pytest.mark.parametrize(("edits", "message"), [
    ({"additionalGids": [44]}, "adds groups (additionalGids), which a user namespace cannot map"),
    ({"intelRdt": {"closID": "x"}}, "Intel RDT settings (intelRdt), which need root"),
    ({"netDevices": [{"hostInterfaceName": "eth1", "name": "eth1"}]}, "network devices (netDevices)"),
    ({"hooks": [{"hookName": "poststop", "path": "/bin/true"}]}, "a poststop hook (/bin/true)"),
    ({"mounts": [{"hostPath": "/a", "containerPath": "/a", "options": ["bind", "r0"]}]},
     "option 'r0' is no bind-mount option"),
])
def test_what_an_unprivileged_container_cannot_do_is_an_error(edits: dict[str, Any], message: str,
                                                              tmp_path: Path) -> None:
    write(tmp_path, "s.json", spec(devices=[{"name": "a", "containerEdits": edits}]))
    with pytest.raises(CdiError, match=message.replace("(", r"\(").replace(")", r"\)")):
        edits_for(["example.com/thing=a"], load([str(tmp_path)]))


def test_group_zero_is_no_group_to_add(tmp_path: Path) -> None:
    write(tmp_path, "s.json", spec(devices=[{"name": "a", "containerEdits": {"additionalGids": [0]}}]))
    assert edits_for(["example.com/thing=a"], load([str(tmp_path)])).environment == ()


def test_a_spec_others_could_change_is_not_read(tmp_path: Path) -> None:
    """Its hooks would run as whoever asks for its devices: only root's (and the user's own) count."""
    folder = tmp_path / "open"
    write(folder, "s.json", spec())
    folder.chmod(0o777)
    registry = load([str(folder)])
    assert registry.devices == {}
    assert registry.invalid == {
        str(folder / "s.json"): f"{folder / 's.json'}: {folder} can be changed by others than root and you: not read"}
    folder.chmod(0o755)
    assert list(load([str(folder)]).devices) == ["example.com/thing=a"]


def test_a_spec_that_is_no_regular_file_is_left_out_at_once(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.json")  # reading it would wait for a writer forever
    (tmp_path / "folder.yaml").mkdir()
    registry = load([str(tmp_path)])
    assert registry.invalid == {str(tmp_path / "fifo.json"): f"{tmp_path / 'fifo.json'}: not a regular file",
                                str(tmp_path / "folder.yaml"): f"{tmp_path / 'folder.yaml'}: not a regular file"}
