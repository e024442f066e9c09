"""Merging layers top-down: whiteouts, opaque directories, replacement, links, and hostile input."""

from __future__ import annotations

import contextlib
import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from hydria.image.squash.flatten import (
    ExtraFile,
    LayerStream,
    UnreadableLayer,
    UnsafeLayer,
    ancestors,
    clean_path,
    flatten,
    usable_mode,
)

Entry = tuple[str, str, object]  # (path, kind, payload)


def layer(*entries: Callable[[tarfile.TarFile], None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for add in entries:
            add(tar)
    return buffer.getvalue()


def f(name: str, data: str = "", mode: int = 0o644, uid: int = 0, xattrs: dict[str, str] | None = None):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        payload = data.encode()
        info.size, info.mode, info.uid = len(payload), mode, uid
        info.pax_headers = {f"SCHILY.xattr.{k}": v for k, v in (xattrs or {}).items()}
        tar.addfile(info, io.BytesIO(payload))
    return add


def d(name: str, mode: int = 0o755):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)
    return add


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        tar.addfile(info)
    return add


def dev(name: str):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(info)
    return add


def merge(*layers_top_first: bytes, extras: tuple[ExtraFile, ...] = (),
          overlay_format: bool = False) -> dict[str, tarfile.TarInfo | str]:
    streams = [LayerStream(f"sha256:{i}", lambda data=data: contextlib.nullcontext(io.BytesIO(data)), overlay_format)
               for i, data in enumerate(layers_top_first)]
    out = io.BytesIO()
    flatten(streams, extras, out)
    out.seek(0)
    result: dict[str, tarfile.TarInfo | str] = {}
    with tarfile.open(fileobj=out) as tar:
        for member in tar:
            assert member.name not in result, f"{member.name} written twice"
            result[member.name] = member
            if member.isreg():
                result[member.name + "#data"] = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    return result


def test_upper_layer_wins() -> None:
    out = merge(layer(f("etc/motd", "upper")), layer(d("etc"), f("etc/motd", "lower"), f("etc/other", "kept")))
    assert out["etc/motd#data"] == "upper"
    assert out["etc/other#data"] == "kept"
    assert out["etc"].isdir()


def test_whiteout_deletes_file_and_directory_of_lower_layers() -> None:
    out = merge(
        layer(f("a/.wh.gone"), f(".wh.tree")),
        layer(d("a"), f("a/gone"), f("a/stays"), d("tree"), f("tree/deep/x")),
    )
    assert "a/gone" not in out and "a/.wh.gone" not in out
    assert "a/stays" in out
    assert not any(name.startswith("tree") for name in out)


def test_a_folder_named_as_a_whiteout_is_a_marker_too() -> None:
    out = merge(layer(d(".wh.x")), layer(f("x", "old"), f("y", "kept")))
    assert sorted(name for name in out if not name.endswith("#data")) == ["y"]


def deletion_mark(name: str, major: int = 0, minor: int = 0):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.devmajor, info.devminor, info.mode = tarfile.CHRTYPE, major, minor, 0
        tar.addfile(info)
    return add


def opaque_folder(name: str, mode: int = 0o755):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        info.pax_headers = {"SCHILY.xattr.user.overlay.opaque": "y", "SCHILY.xattr.user.kept": "1"}
        tar.addfile(info)
    return add


def test_layer_images_deletions_and_opaque_folders_mean_what_the_overlay_reads() -> None:
    """A layer image's tar (sqfs2tar of what image/squash/layer_image.py wrote) merges as its OCI layer would."""
    out = merge(
        layer(d("a"), deletion_mark("a/gone"), deletion_mark("tree"), opaque_folder("cache", 0o750),
              f("cache/new"), deletion_mark("dev/null", 1, 3), f("x", "new")),
        layer(d("a"), f("a/gone"), f("a/stays"), d("tree"), f("tree/deep/x"), d("cache"), f("cache/old"),
              f("x", "old")),
        overlay_format=True)
    assert sorted(name for name in out if not name.endswith("#data")) == \
        ["a", "a/stays", "cache", "cache/new", "x"], "the device 1,3 dropped as any device"
    assert out["x#data"] == "new" and out["cache"].mode == 0o750
    assert out["cache"].pax_headers == {"SCHILY.xattr.user.kept": "1"}, "the overlay's own marks left out"


def test_a_device_0_0_of_an_oci_layer_is_no_deletion() -> None:
    out = merge(layer(deletion_mark("x")), layer(f("x", "old")))
    assert out["x#data"] == "old"


def test_whiteout_applies_only_below_its_layer() -> None:
    out = merge(layer(f("x", "new")), layer(f(".wh.x")), layer(f("x", "old")))
    assert out["x#data"] == "new"


def test_opaque_directory_hides_lower_content_but_keeps_its_own() -> None:
    out = merge(
        layer(d("etc/apt/apt.conf.d", 0o750), f("etc/apt/apt.conf.d/.wh..wh..opq"), f("etc/apt/apt.conf.d/new")),
        layer(d("etc/apt/apt.conf.d"), f("etc/apt/apt.conf.d/old"), f("etc/apt/sources.list")),
    )
    assert "etc/apt/apt.conf.d/new" in out
    assert "etc/apt/apt.conf.d/old" not in out
    assert "etc/apt/sources.list" in out
    assert out["etc/apt/apt.conf.d"].mode == 0o750


def test_file_replacing_a_directory_hides_its_children() -> None:
    out = merge(layer(f("opt", "now a file")), layer(d("opt"), f("opt/tool")))
    assert out["opt"].isreg() and "opt/tool" not in out


def test_directory_replacing_a_file() -> None:
    out = merge(layer(d("opt"), f("opt/tool")), layer(f("opt", "was a file")))
    assert out["opt"].isdir() and "opt/tool" in out


def test_a_file_between_two_folders_hides_what_the_lowest_has_below_it() -> None:
    # merge() takes the top layer first: the folder opt of the middle layer's lower layer was
    # replaced by a file, and the top layer's folder opt is a new, empty one.
    out = merge(layer(d("opt")), layer(f("opt", "a file")), layer(d("opt"), f("opt/tool")))
    assert out["opt"].isdir() and "opt/tool" not in out
    under_a_new_folder = merge(layer(f("opt/new")), layer(f("opt", "a file")), layer(d("opt"), f("opt/tool")))
    assert set(under_a_new_folder) >= {"opt", "opt/new"} and "opt/tool" not in under_a_new_folder


def test_what_a_layer_has_below_its_own_file_stays_out_whatever_the_layers_above() -> None:
    # The layer alone has no opt/tool (opt is its file): a folder opt above it does not bring it
    # back, as a layered image (stacked by the overlay, image/squash/layer_image.py) shows it too.
    out = merge(layer(d("opt")), layer(f("opt", "a file"), d("opt/tool"), f("opt/tool/x")))
    assert out["opt"].isdir() and "opt/tool" not in out and "opt/tool/x" not in out


def test_implicit_parent_takes_the_lower_layers_attributes() -> None:
    out = merge(layer(f("srv/data/x")), layer(d("srv", 0o750)))
    assert out["srv"].mode == 0o750


def test_lower_symlink_cannot_redirect_an_upper_directory() -> None:
    out = merge(layer(f("etc/passwd", "image")), layer(link("etc", "/host/etc")))
    assert "etc" not in out or not out["etc"].issym()
    assert out["etc/passwd#data"] == "image"


def test_links_kept_and_hardlink_groups_preserved() -> None:
    out = merge(layer(f("a", "x"), link("b", "a", tarfile.LNKTYPE), link("c", "/etc/os-release"),
                      link("d", "../../x")))
    assert out["b"].islnk() and out["b"].linkname == "a"
    assert out["c"].linkname == "/etc/os-release"
    assert out["d"].linkname == "../../x"  # a symlink's target is resolved in the container, not here


def test_hardlink_whose_target_an_upper_layer_replaced_keeps_its_content() -> None:
    out = merge(layer(f("bin/tool", "new")), layer(f("bin/tool", "old"), link("bin/alias", "bin/tool", tarfile.LNKTYPE)))
    assert out["bin/tool#data"] == "new"
    assert out["bin/alias#data"] == "old"


def test_hardlink_whose_target_was_deleted_keeps_its_content() -> None:
    out = merge(layer(f("a/.wh.orig")),
                layer(f("a/orig", "data"), link("a/l1", "a/orig", tarfile.LNKTYPE), link("a/l2", "a/orig", tarfile.LNKTYPE)))
    assert "a/orig" not in out
    assert out["a/l1#data"] == "data"
    assert out["a/l2"].islnk() and out["a/l2"].linkname == "a/l1"


def test_devices_dropped_fifos_kept() -> None:
    def fifo(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("run/pipe")
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
    out = merge(layer(dev("dev/null"), fifo))
    assert "dev/null" not in out and out["run/pipe"].isfifo()


def test_modes_made_usable_and_ownership_kept() -> None:
    out = merge(layer(d("root", 0o000), f("secret", mode=0o000, uid=1234), f("tool", mode=0o011),
                      f("suid", mode=0o4755)))
    assert out["root"].mode == 0o700
    assert out["secret"].mode == 0o400 and out["secret"].uid == 1234
    assert out["tool"].mode == 0o511
    assert out["suid"].mode == 0o4755  # kept; the runtime mounts images nosuid


def test_only_user_xattrs_survive() -> None:
    out = merge(layer(f("x", xattrs={"user.origin": "a", "security.capability": "b", "trusted.overlay.opaque": "y"})))
    assert out["x"].pax_headers.get("SCHILY.xattr.user.origin") == "a"
    assert not any("security" in k or "trusted" in k for k in out["x"].pax_headers)


def test_absolute_and_dotted_names_are_normalised() -> None:
    out = merge(layer(f("/etc/abs", "1"), f("./etc/./dot", "2"), f("etc//double", "3")))
    assert {"etc/abs", "etc/dot", "etc/double"} <= set(out)


@pytest.mark.parametrize("name", ["../escape", "a/../../escape", "/../../etc/passwd", "a/b/../../../c"])
def test_escaping_paths_are_refused(name: str) -> None:
    with pytest.raises(UnsafeLayer, match="would land outside the root filesystem"):
        merge(layer(f(name, "x")))


def test_escaping_hardlink_target_is_refused() -> None:
    with pytest.raises(UnsafeLayer, match="outside the root filesystem"):
        merge(layer(link("evil", "../../etc/shadow", tarfile.LNKTYPE)))


def test_hardlink_to_nothing_is_refused() -> None:
    with pytest.raises(UnsafeLayer, match="not a file of the image"):
        merge(layer(link("evil", "etc/shadow", tarfile.LNKTYPE)))


def test_empty_blob_is_a_layer_without_entries() -> None:
    out = merge(b"", layer(f("etc/hostname", "below")))
    assert out["etc/hostname#data"] == "below"


@pytest.mark.parametrize(("data", "reason"), [
    (b"not a tar archive\n" * 100, "invalid header"),
    (layer(f("big", "x" * 5000))[:2048], "unexpected end of data"),
])
def test_unreadable_layer_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(UnreadableLayer, match=f"layer sha256:0 is not a readable tar archive: .*{reason}"):
        merge(data)


def test_large_files_pass_through_whole() -> None:
    """Content that spans many read chunks, next to small files, arrives byte for byte."""
    big = "".join(chr(97 + i % 26) * 1000 for i in range(3000))  # 3 MB in 1 MiB chunks
    out = merge(layer(f("small", "s"), f("big", big), f("after", "a")))
    assert out["big#data"] == big and out["small#data"] == "s" and out["after#data"] == "a"


@pytest.mark.parametrize("tar_format", ["gnu", "posix"])
def test_sparse_files_are_written_whole(tar_format: str, tmp_path: Path) -> None:
    """GNU tar --sparse stores only a file's data; the image gets the file with its holes as zeros."""
    holey = tmp_path / "holey"
    with holey.open("wb") as handle:
        handle.truncate(3 << 20)
        handle.seek(1_500_000)
        handle.write(b"middle")
        handle.seek(3_000_000)
        handle.write(b"end")
    archive = tmp_path / "layer.tar"
    subprocess.run(["tar", "--sparse", f"--format={tar_format}", "-C", str(tmp_path), "-cf", str(archive), "holey"],
                   check=True)
    with tarfile.open(archive) as tar:
        assert tar.getmember("holey").sparse  # the layer really stores it sparse
    out = merge(archive.read_bytes(), layer(f("after", "next entry")))
    assert out["holey#data"] == holey.read_text()
    assert out["holey"].type == tarfile.REGTYPE and out["after#data"] == "next entry"


def test_extras_sit_above_every_layer() -> None:
    out = merge(layer(d("etc"), f("etc/rc", "image's own")),
                extras=(ExtraFile("etc/rc", b"generated"), ExtraFile("work", None)))
    assert out["etc/rc#data"] == "generated"
    assert out["work"].isdir() and out["etc"].isdir()


@pytest.mark.parametrize(("name", "expected"), [("", ""), ("./", ""), ("/a//b/./c/", "a/b/c"), ("a", "a")])
def test_clean_path(name: str, expected: str) -> None:
    assert clean_path(name, "l") == expected


def test_ancestors_and_modes() -> None:
    assert list(ancestors("a/b/c")) == ["a", "a/b"]
    assert list(ancestors("a")) == []
    assert usable_mode(0o000, True) == 0o700
    assert usable_mode(0o070, False) == 0o570
    assert usable_mode(0o060, False) == 0o460


@pytest.mark.timeout(30)
def test_a_deep_tree_merges_in_time_linear_in_its_size() -> None:
    """Nested directories (10,000 in a 0.8 MB crafted layer) took time cubic in the depth when each
    entry looked at every ancestor (6,000: ~100 s, now ~2 s); a lower layer under the same tree and
    a whiteout deep in it still apply."""
    depth = 6_000
    names = ["d"] * depth
    deep = "/".join(names)
    upper = layer(*(d("/".join(names[:i])) for i in range(1, depth + 1)), f(f"{deep}/.wh.gone"),
                  f(f"{deep}/top", "upper"))
    lower = layer(f(f"{deep}/gone", "deleted"), f(f"{deep}/kept", "lower"))
    merged = merge(upper, lower)
    assert merged[f"{deep}/top#data"] == "upper" and merged[f"{deep}/kept#data"] == "lower"
    assert f"{deep}/gone" not in merged
