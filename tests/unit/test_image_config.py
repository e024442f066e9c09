"""An image config is untrusted: its values cannot change the structure of /etc/fstab,
/etc/environment or /etc/rc, and a config of the wrong shape is a clear error."""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.image.ref.runtime_files import ImageConfigInvalid, runtime_files
from hydria.runtime import environ, fstab

ROOT = "/run/root"
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=6)
_FIELDS = ["Entrypoint", "Cmd", "Env", "WorkingDir", "Volumes", "Labels", "User"]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_FIELDS), _JSON | st.lists(_TEXT, max_size=3)
                       | st.dictionaries(_TEXT, st.just({}), max_size=3), max_size=5))
def test_any_config_is_refused_or_keeps_the_files_structure(config: dict[str, Any]) -> None:
    try:
        files = runtime_files(config, "docker://example/image")
    except ImageConfigInvalid as e:
        assert e.message.startswith("Invalid image config: ")
        return
    volumes = sorted({"/" + posixpath.normpath(v).lstrip("/") for v in config.get("Volumes") or {}
                      if v.startswith("/")} - {"/"})
    entries = fstab.parse(files.fstab, "image fstab", {"HYDRIA_ROOTFS": ROOT, "HOME": "/home/user"})
    assert [(e.source, e.target, e.options) for e in entries] == [
        (ROOT + v, v, ("x-create=dir", "bind", "rw", "nosuid", "nodev")) for v in volumes]
    env = config.get("Env") or []
    env = [env] if isinstance(env, str) else env
    assert len(files.environment.splitlines()) == len([e for e in env if "=" in e])
    comments = files.rc.split("\n[ -d ")[0]
    assert all(line.startswith("#") for line in comments.splitlines())


@pytest.mark.parametrize("volume", ["/x\n/etc /etc2 none rbind", "/a b", "/t\tab", "/${HOME}", "/x\\040y",
                                    "/#comment", "/v\x0bw", "/p\x85q"])
def test_volume_names_are_one_fstab_field(volume: str) -> None:
    entries = fstab.parse(runtime_files({"Volumes": {volume: {}}}, "u").fstab, "f", {"HYDRIA_ROOTFS": ROOT})
    assert [(e.source, e.target) for e in entries] == [(ROOT + volume, volume)]


@pytest.mark.parametrize(("volume", "inside"), [("/../../../home/user", "/home/user"), ("/a/../../etc", "/etc"),
                                                ("//x/./y/", "/x/y"), ("/..", None), ("relative", None)])
def test_volume_paths_cannot_climb_above_the_root(volume: str, inside: str | None) -> None:
    entries = fstab.parse(runtime_files({"Volumes": {volume: {}}}, "u").fstab, "f", {"HYDRIA_ROOTFS": ROOT})
    assert [(e.source, e.target) for e in entries] == ([(ROOT + inside, inside)] if inside else [])


def test_a_volume_fstab_cannot_hold_is_refused() -> None:
    with pytest.raises(ImageConfigInvalid, match="cannot hold"):
        runtime_files({"Volumes": {"/a\u2028b": {}}}, "u")


def test_environment_values_stay_on_their_line() -> None:
    files = runtime_files({"Env": ["A=1\nB=2", "C=3\u2028D=4\x0bE=5", "F=6"]}, "u")
    assert environ.parse_env_lines(files.environment) == [("A", "1 B=2"), ("C", "3 D=4 E=5"), ("F", "6")]


@pytest.mark.parametrize(("config", "message"), [
    ([1, 2], "config must be an object, not list"),
    ("text", "config must be an object, not str"),
    ({"Labels": ["a"]}, "Labels must be an object, not list"),
    ({"Entrypoint": 5}, "Entrypoint must be a list of strings, not int"),
    ({"Cmd": ["ok", 5]}, "Cmd must be text, not int"),
    ({"Env": ["A=\0"]}, "Env holds a NUL byte"),
    ({"WorkingDir": ["/"]}, "WorkingDir must be text, not list"),
    ({"Volumes": ["/v"]}, "Volumes must be an object, not list"),
])
def test_wrong_shapes_are_clear_errors(config: Any, message: str) -> None:
    with pytest.raises(ImageConfigInvalid, match=message):
        runtime_files(config, "u")


def test_hostile_words_run_as_words(tmp_path: Path) -> None:
    marker = tmp_path / "injected"
    words = ["echo", f"'; touch {marker}; '", f"$(touch {marker})", "`x`\nnext"]
    rc = tmp_path / "rc"
    files = runtime_files({"Entrypoint": words, "WorkingDir": str(tmp_path), "Labels": {"a\nexit 3": "b\nexit 4"}},
                          "docker://x\nexit 5")
    rc.write_text(files.rc)
    result = subprocess.run(["/bin/sh", str(rc)], capture_output=True, text=True, check=True)
    assert result.stdout == " ".join(words[1:]) + "\n" and not marker.exists()
