"""enroot's fstab dialect: shorthands, passes, options, substitution; target resolution."""

from __future__ import annotations

import os
import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.runtime import syscalls as sc
from hydria.runtime.fstab import (
    MOUNT_OPTION_FORM,
    FstabError,
    MountEntry,
    from_mount_option,
    parse,
    parse_line,
    substitute,
)
from hydria.runtime.mounts import MountFailed, open_in_root, resolve_in_root


@pytest.mark.parametrize(("line", "expected"), [
    ("tmpfs /dst", ("tmpfs", "/dst", "tmpfs", ("x-create=dir",))),
    ("/src", ("/src", "/src", "none", ("rbind", "x-create=auto"))),
    ("/src bind", ("/src", "/src", "none", ("bind",))),
    ("/src /dst", ("/src", "/dst", "none", ("rbind", "x-create=auto"))),
    ("/src /dst bind", ("/src", "/dst", "none", ("bind",))),
    ("/src /dst ro", ("/src", "/dst", "none", ("rbind", "x-create=auto", "ro"))),
    ("none /dst devpts", ("none", "/dst", "devpts", ())),
    ("/a\\040b /c none bind,ro", ("/a b", "/c", "none", ("bind", "ro"))),
])
def test_shorthands(line: str, expected: tuple[str, str, str, tuple[str, ...]]) -> None:
    entry = parse_line(line)
    assert entry is not None
    assert (entry.source, entry.target, entry.fstype, entry.options) == expected


def test_passes_and_comments() -> None:
    entries = parse("# comment\n\n/proc /proc none rbind 0 -1\ntmpfs /t tmpfs mode=755 0 0\n/x /y none bind 2 0\n", "f")
    assert [e.passno for e in entries] == [-1, 0, 2]
    assert entries[0].origin == "f:3"


def test_options_split_into_flags_propagation_and_data() -> None:
    entry = MountEntry("tmpfs", "/t", "tmpfs", ("ro", "nosuid", "rprivate", "mode=755", "size=1g", "nofail", "x-create=dir"))
    flags, propagation, data, recursive = entry.split_options()
    assert flags == sc.MS_RDONLY | sc.MS_NOSUID
    assert propagation == sc.MS_PRIVATE | sc.MS_REC
    assert data == "mode=755,size=1g" and not recursive
    assert MountEntry("/a", "/b", "none", ("rbind",)).split_options()[3]
    assert not MountEntry("/a", "/b", "none", ("bind",)).split_options()[3]


def test_substitution_only_braced_and_unset_is_empty() -> None:
    assert substitute("${HYDRIA_ROOTFS}/data $HOME ${NOPE}x", {"HYDRIA_ROOTFS": "/r", "HOME": "/h"}) == "/r/data $HOME x"
    assert substitute("$${A}${${A}}${1A}${A", {"A": "v"}) == "$v${v}${1A}${A"


def test_substitution_scanner_matches_the_regular_expression() -> None:
    """The scanner replaced ``re.sub`` (start time); it must substitute exactly as that did."""
    pattern = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
    env = {"A": "x", "B_1": "${A}", "_": ""}
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice(["$", "{", "}", "A", "B_1", "_", "1", "/", " ", "${", "}"]) for _ in range(rng.randint(0, 12)))
        assert substitute(text, env) == pattern.sub(lambda m: env.get(m.group(1), ""), text), text


@pytest.mark.parametrize(("value", "expected"), [
    ("/host/dir:/mnt", ("/host/dir", "/mnt", "none")),
    ("/host/dir:/mnt:none:bind,ro", ("/host/dir", "/mnt", "none")),
    ("tmpfs:/scratch", ("tmpfs", "/scratch", "tmpfs")),
])
def test_mount_option(value: str, expected: tuple[str, str, str]) -> None:
    entry = from_mount_option(value)
    assert (entry.source, entry.target, entry.fstype) == expected


@pytest.mark.parametrize("value", ["", "a b:/c", "/a:/b c", "/a::/b"])
def test_bad_mount_option(value: str) -> None:
    with pytest.raises(FstabError, match="Invalid argument") as failed:
        from_mount_option(value)
    assert failed.value.hint == MOUNT_OPTION_FORM


@pytest.mark.parametrize("value", ["/a:/b:none:bind:0:-1", "/a:/b:none:bind:0:2", "/a:/b:none:bind:1"])
def test_a_mount_option_of_a_pass_other_than_zero_is_refused(value: str) -> None:
    """A --mount is mounted with pass 0, after the hooks: another pass would mount it never."""
    with pytest.raises(FstabError, match="Invalid argument: .* never in pass") as failed:
        from_mount_option(value)
    assert failed.value.hint == "leave out FREQ:PASSNO, or give 0:0"
    assert from_mount_option("/a:/b:none:bind:0:0").passno == 0


def test_a_mount_option_with_fields_out_of_place_says_the_form() -> None:
    """/data:/data:bind:ro:x reads ro as the options and x as the dump frequency."""
    with pytest.raises(FstabError, match='invalid fstab entry: "/tmp /mnt bind ro x" at --mount') as failed:
        from_mount_option("/tmp:/mnt:bind:ro:x")
    assert failed.value.hint == MOUNT_OPTION_FORM
    with pytest.raises(FstabError) as in_a_file:
        parse("/tmp /mnt none bind x", "mounts.d/a.fstab")
    assert in_a_file.value.hint is not None and "SOURCE TARGET TYPE OPTIONS" in in_a_file.value.hint


def test_resolution_stays_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "usr" / "lib").mkdir(parents=True)
    os.symlink("/usr/lib", root / "lib")
    os.symlink("../../../../../../etc", root / "usr" / "up")
    os.symlink("loop", root / "loop")
    assert resolve_in_root(str(root), "/lib/x") == f"{root}/usr/lib/x"
    assert resolve_in_root(str(root), "usr/up/passwd") == f"{root}/etc/passwd"
    assert resolve_in_root(str(root), "/etc/../usr") == f"{root}/usr"
    with pytest.raises(MountFailed, match="outside the container's root"):
        resolve_in_root(str(root), "../x")
    with pytest.raises(MountFailed, match="too many levels"):
        resolve_in_root(str(root), "/loop/x")


def opened_path(root: str, path: str) -> str:
    fd = open_in_root(root, path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def test_sources_are_opened_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "usr" / "lib").mkdir(parents=True)
    os.symlink(str(tmp_path), root / "host")  # absolute: the root's own path, not the host's
    os.symlink("../../../../../../etc", root / "usr" / "up")
    os.symlink("loop", root / "loop")
    assert opened_path(str(root), "/usr/up") == f"{root}/etc"
    assert opened_path(str(root), "/") == str(root)
    with pytest.raises(FileNotFoundError):
        open_in_root(str(root), f"/host/{root.name}")
    with pytest.raises(MountFailed, match="outside the container's root"):
        open_in_root(str(root), "/../x")
    with pytest.raises(MountFailed, match="too many levels"):
        open_in_root(str(root), "/loop")


_NAMES = st.sampled_from(["a", "b", "..", ".", "etc"])
_LINK_TEXT = st.lists(_NAMES, min_size=1, max_size=4).map("/".join).flatmap(
    lambda rest: st.sampled_from([rest, "/" + rest, "../../../" + rest]))


@settings(max_examples=150, deadline=None)
@given(links=st.dictionaries(st.sampled_from(["a", "b", "etc/c"]), _LINK_TEXT, max_size=3),
       path=st.lists(_NAMES, max_size=5).map("/".join))
def test_no_link_leads_a_source_out_of_the_root(links: dict[str, str], path: str) -> None:
    """Whatever links an image holds, a source resolves inside the root, as a target does."""
    with tempfile.TemporaryDirectory() as top:
        root = os.path.join(top, "root")
        os.makedirs(os.path.join(root, "etc"))
        os.makedirs(os.path.join(top, "etc", "outside"))
        for name, text in links.items():
            os.symlink(text, os.path.join(root, name))
        try:
            expected: str | None = resolve_in_root(root, path)
        except MountFailed:
            expected = None
        if expected is None:  # a ".." above the root or a loop; a missing component may come first
            with pytest.raises((MountFailed, FileNotFoundError)):
                open_in_root(root, path)
            return
        try:
            found = opened_path(root, path)
        except OSError:  # a missing component, which a lexical ".." may have skipped
            climbs = any(".." in text.split("/") for text in [path, *links.values()])
            assert climbs or not os.path.exists(expected)
            return
        assert found == os.path.realpath(expected)
        assert found == root or found.startswith(root + "/")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_fstab_text_parses_or_is_a_clear_error(text: str) -> None:
    try:
        entries = parse(text, "mounts.d/x.fstab", {"HOME": "/home/u"})
    except FstabError as e:
        assert "mounts.d/x.fstab" in e.message
        return
    for entry in entries:
        entry.split_options()  # never raises


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_mount_option_parses_or_is_a_clear_error(value: str) -> None:
    try:
        from_mount_option(value)
    except FstabError as e:
        assert e.message.startswith(("Invalid argument", "invalid fstab entry"))
