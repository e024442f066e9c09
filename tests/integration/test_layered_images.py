"""Layered images (HYDRIA_LAYERED_IMAGES): the layers stacked by the container's overlay show
the same tree as the same layers merged into one image, whatever the layers hold (deletions,
opaque folders, hardlinks, paths below files, repeated paths); a new version of an image
squashes only its new layers and shares the rest; a Slurm step's import and a start use it."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from hydria.anonfile import anonymous_file
from hydria.image.squash.flatten import LayerStream, flatten
from hydria.image.squash.layer_image import LayerNeedsMerge, end_archive, overlay_layer
from hydria.image.squash.one_file import write_merged
from hydria.image.squash.squashfs import Tar2Sqfs, squash_plan
from hydria.runtime.layered import layered_text
from testbed.oci import Image, make_layer, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.tarbuild import LayerTar
from testbed.users import User, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
PATHS = ("a", "b", "x", "a/x", "a/y", "a/c", "a/c/z", "b/x")
FOLDERS = ("a", "b", "a/c")
# Mounts the images given as {label: [path, its kept tree or None, served by hydria's reader]} as
# containers (runtime/rootfs.py) in a user namespace of the test user and prints each tree as
# testbed/tree.py describes it.
VIEW = """
import json, sys, tempfile
from pathlib import Path
from hydria.runtime import rootfs
from testbed.tree import snapshot
images, scratch, native = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
trees = {}
for label, (image, kept, fast) in images.items():
    area = tempfile.mkdtemp(dir=scratch)
    root = rootfs.mount_container(rootfs.Container(label, image), area, 0, 0, native_overlay=native,
                                  fast_reader=fast, source=rootfs.ImageSource(tree=kept))
    nodes, groups = snapshot(Path(root))
    trees[label] = {"nodes": {path: list(node) for path, node in sorted(nodes.items())},
                    "links": sorted(sorted(group) for group in groups)}
print(json.dumps(trees))
"""


# Keeps files of a layered image in a read cache as the read cache's unpacker does when the reader
# names them read (container/unpack_behind.py), as the test user: those of each layer image whose
# inode numbers are in range(START, count, STEP) (every file: 1 and 1; every other: 1 and 2), of
# the layer images whose places (from 0) LAYERS lists ("all": each). Prints the image's tree.
KEEP = """
import json, struct, sys
from hydria.container import read_cache, unpack_behind
from hydria.runtime.rootfs import image_layers
cache = read_cache.ReadCache(sys.argv[2], 1 << 40)
image, first, step, only = sys.argv[1], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
read = set()
for place, layer in enumerate(image_layers(image)):
    if only != "all" and str(place) not in only.split(","):
        continue
    with open(layer, "rb") as handle:
        inodes = struct.unpack("<I", handle.read(8)[4:])[0]
    read |= {(place, number) for number in range(first, inodes + 1, step)}
key = read_cache.image_key(image)
unpack_behind.keep(cache, image, key, read)
print(json.dumps(read_cache.kept_tree(cache, key)))
"""


def keep_layers(user: User, image: Path, folder: Path, first: int = 1, step: int = 1,
                layers: tuple[int, ...] | None = None) -> str | None:
    """The tree of ``image``, kept by the read cache's unpacker in ``folder`` as if the files of
    each layer image (those whose places ``layers`` gives) of inode numbers ``first``, ``first +
    step``, ... had been read (KEEP); None where the image shows none of them."""
    only = "all" if layers is None else ",".join(map(str, layers))
    done = run_as(user, [sys.executable, "-c", KEEP, str(image), str(folder), str(first), str(step), only],
                  env={"PYTHONPATH": str(REPOSITORY_ROOT)}, cwd=REPOSITORY_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)
    assert tree is None or isinstance(tree, str)
    return tree


def view(user: User, images: dict[str, Path], scratch: Path, native: bool = True,
         kept: dict[str, str | None] | None = None, stacked: tuple[str, ...] = ()) -> dict[str, Any]:
    """Each image's tree as a container of ``user`` sees it (kernel overlay, or fuse-overlayfs),
    with the read cache's tree that ``kept`` gives by label; those ``stacked`` names served by
    squashfuse (the fallback: one mount for each layer image, stacked by the overlay), the
    others by hydria's reader (one mount, the layer images merged)."""
    kept = kept or {}
    listed = {label: [str(path), kept.get(label), label not in stacked] for label, path in images.items()}
    done = run_as(user, ["unshare", "--map-root-user", "--mount", sys.executable, "-c", VIEW,
                         json.dumps(listed), str(scratch), "1" if native else "0"],
                  env={"PYTHONPATH": str(REPOSITORY_ROOT)}, cwd=REPOSITORY_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# One layer: entries in order; ("dir", path, mode), ("file", path, data), ("link", path, target),
# ("hardlink", path, target), ("whiteout", path), ("opaque", folder).
Entry = tuple[Any, ...]
entries = st.one_of(
    st.tuples(st.just("dir"), st.sampled_from(PATHS), st.sampled_from((0o755, 0o700, 0o750))),
    st.tuples(st.just("file"), st.sampled_from(PATHS), st.sampled_from(("one", "two", "three"))),
    st.tuples(st.just("link"), st.sampled_from(PATHS), st.sampled_from(("a/x", "/b", "missing"))),
    st.tuples(st.just("hardlink"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("whiteout"), st.sampled_from(PATHS)),
    st.tuples(st.just("opaque"), st.sampled_from(FOLDERS)),
)
stacks = st.lists(st.lists(entries, max_size=7), min_size=1, max_size=4)


def write_layer(path: Path, layer: list[Entry]) -> None:
    """A layer tar as image builders write one: each entry's folders before it; a hardlink only
    to a file of the layer. A path's first entry in the layer is the one that counts (hydria's
    rule, docs/import.md), so a file below an earlier file of the layer is none, even where a
    folder entry of that name follows the file."""
    files: set[str] = set()
    first: dict[str, str] = {}  # path -> "dir" or "other": the layer's first entry there
    with LayerTar(path) as tar:
        folders: set[str] = set()
        for kind, name, *rest in layer:
            parent = name if kind == "opaque" else name.rpartition("/")[0]
            parts = parent.split("/") if parent else []
            ancestors = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
            for folder in ancestors:
                if folder not in folders:
                    folders.add(folder)
                    tar.directory(folder)
                    first.setdefault(folder, "dir")
            if kind == "dir":
                tar.directory(name, rest[0])
                folders.add(name)
            elif kind == "file":
                tar.file(name, rest[0])
                if name not in first and all(first[folder] == "dir" for folder in ancestors):
                    files.add(name)
            elif kind == "link":
                tar.symlink(name, rest[0])
            elif kind == "hardlink" and rest[0] in files and rest[0] != name:
                tar.hardlink(name, rest[0])
            elif kind == "whiteout":
                tar.whiteout(name)
            elif kind == "opaque":
                tar.opaque(name)
            first.setdefault(name, "dir" if kind in ("dir", "opaque") else "other")


@contextmanager
def opened(path: Path) -> Iterator[Any]:
    with path.open("rb") as handle:
        yield handle


def squash(target: Path, write: Any) -> None:
    writer = Tar2Sqfs(target, ["--compressor", "zstd"])
    try:
        write(writer.stdin)
    except BaseException:
        writer.abort()
        raise
    writer.finish()


def both_ways(tars: list[Path], folder: Path) -> tuple[Path, Path]:
    """The layers merged into one image, and as a layered image of layer images."""
    streams = [LayerStream(tar.name, lambda tar=tar: opened(tar)) for tar in tars]
    merged = folder / "merged.sqsh"
    squash(merged, lambda out: flatten(list(reversed(streams)), [], out))
    names = []
    for number, stream in enumerate(streams):
        names.append(f"layer{number}.sqsh")

        def write(out: Any, stream: LayerStream = stream) -> None:
            overlay_layer(stream, out)
            end_archive(out)
        squash(folder / names[-1], write)
    layered = folder / "image.layers"
    layered.write_bytes(layered_text(names))
    for path in folder.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)
    return merged, layered


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(stack=stacks)
@example(stack=[[("file", "b", "one"), ("dir", "b/x", 0o755)], [("dir", "b", 0o755)]])  # found by Hypothesis
@example(stack=[[("dir", "b/x", 0o755)], [("file", "b", "one")], [("dir", "b", 0o755)]])  # found by Hypothesis
@example(stack=[[("dir", "a", 0o755), ("file", "a", "one"), ("hardlink", "b", "a")]])  # found by Hypothesis
@example(stack=[[("file", "a", "one"), ("file", "a/x", "one"), ("hardlink", "b", "a/x")]])  # found by Hypothesis
# A folder that 8 layers and more have: the reader finds its names in the folder's merged listing.
@example(stack=[[("file", "a/x", "one")], [("file", "a/y", "one")], [("file", "a/c/z", "one")], [("whiteout", "a/x")],
                [("dir", "a/c", 0o700)], [("file", "a/y", "two")], [("whiteout", "a/c")], [("file", "a/c", "three")],
                [("file", "a/x", "two")], [("link", "b", "a/x")]])
@example(stack=[[("file", "a/x", "one"), ("file", "b/x", "one")], [("file", "a/y", "one")], [("file", "a/c/z", "one")],
                [("file", "a/x", "two")], [("file", "a/y", "two")], [("file", "a/c/z", "two")], [("whiteout", "a/y")],
                [("file", "a/x", "three")], [("opaque", "a"), ("file", "a/c/z", "three")], [("whiteout", "b/x")]])
def test_stacked_layers_show_the_merged_tree(stack: list[list[Entry]], workspace: Workspace) -> None:
    folder = workspace.root / uuid.uuid4().hex
    folder.mkdir()
    folder.chmod(0o755)
    tars = []
    for number, layer in enumerate(stack):
        tars.append(folder / f"layer{number}.tar")
        write_layer(tars[-1], layer)
    try:
        merged, layered = both_ways(tars, folder)
    except LayerNeedsMerge:
        assume(False)  # the import merges such an image into one file
    scratch = folder / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    # Each layer image's tree above its mount: with every file read, and with every other one.
    every = keep_layers(workspace.user, layered, scratch / "every")
    some = keep_layers(workspace.user, layered, scratch / "some", first=2, step=2)
    with anonymous_file(folder / "remerged.sqsh") as remerged:  # one file again, as import -o writes it
        write_merged(str(layered), remerged, squash_plan("-comp zstd", 1))
        assert remerged.commit()
    (folder / "remerged.sqsh").chmod(0o644)
    trees = view(workspace.user, {"merged": merged, "layered": layered, "stacked": layered, "every": layered,
                                  "some": layered, "remerged": folder / "remerged.sqsh"}, scratch,
                 kept={"every": every, "some": some}, stacked=("stacked",))
    assert trees["layered"] == trees["merged"], stack
    # squashfuse shows each name of a hard link as a file of its own (docs/runtime.md)
    assert trees["stacked"]["nodes"] == trees["merged"]["nodes"], stack
    assert trees["every"] == trees["merged"], stack
    assert trees["some"] == trees["merged"], stack
    assert trees["remerged"] == trees["merged"], stack


def test_fuse_overlayfs_stacks_layers_alike(workspace: Workspace) -> None:
    """Where the kernel's overlay is refused, fuse-overlayfs shows the same tree: above the
    reader's merged mount with the read cache's tree, and reading the deletions and opaque folders
    itself from the layer images that squashfuse mounts one by one."""
    tmp_path = workspace.root / "layers"
    tmp_path.mkdir()
    tmp_path.chmod(0o755)
    stack = [[("file", "a/x", "lower"), ("file", "a/y", "kept"), ("file", "b/x", "hidden"), ("file", "x", "gone")],
             [("whiteout", "x"), ("opaque", "b"), ("file", "b/new", "new"), ("file", "a/z", "upper")]]
    tars = []
    for number, layer in enumerate(stack):
        tars.append(tmp_path / f"layer{number}.tar")
        write_layer(tars[-1], layer)
    merged, layered = both_ways(tars, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    kept = keep_layers(workspace.user, layered, scratch / "kept")
    assert kept is not None and sorted(os.listdir(kept)) == ["a", "b"] and sorted(os.listdir(Path(kept, "a"))) == ["x", "y", "z"]
    trees = view(workspace.user, {"merged": merged, "layered": layered, "kept": layered, "stacked": layered}, scratch,
                 native=False, kept={"kept": kept}, stacked=("stacked",))
    assert trees["layered"] == trees["merged"] == trees["kept"]
    assert trees["stacked"]["nodes"] == trees["merged"]["nodes"]  # squashfuse: no hard links (docs/runtime.md)
    assert set(trees["layered"]["nodes"]) == {"a", "a/x", "a/y", "a/z", "b", "b/new"}


def test_the_kept_tree_of_a_layered_image_has_its_folders_as_the_topmost_layer_has_them(
        workspace: Workspace) -> None:
    """A file of a lower layer image, kept: the folders above it in the tree get the mode and time
    of the topmost layer that has them, as the container shows them, not those of the layer that
    was unpacked."""
    folder = workspace.root / "times"
    folder.mkdir()
    folder.chmod(0o755)
    tars = []
    for number, (mode, mtime, name) in enumerate([(0o755, 1_000_000_000, "x"), (0o750, 1_600_000_000, "y")]):
        tars.append(folder / f"layer{number}.tar")
        with tarfile.open(tars[-1], "w", format=tarfile.PAX_FORMAT) as tar:
            for path, kind, data in (("a", tarfile.DIRTYPE, b""), (f"a/{name}", tarfile.REGTYPE, name.encode())):
                info = tarfile.TarInfo(path)
                info.type, info.mode, info.mtime, info.size = kind, mode if kind == tarfile.DIRTYPE else 0o644, mtime, len(data)
                tar.addfile(info, io.BytesIO(data) if data else None)
    _, layered = both_ways(tars, folder)
    scratch = folder / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    kept = keep_layers(workspace.user, layered, scratch / "kept", layers=(0,))  # a/x
    assert kept is not None and os.listdir(Path(kept, "a")) == ["x"]
    shown = Path(kept, "a").stat()
    assert (stat.S_IMODE(shown.st_mode), shown.st_mtime) == (0o750, 1_600_000_000)
    trees = view(workspace.user, {"layered": layered, "kept": layered}, scratch, kept={"kept": kept})
    assert trees["kept"] == trees["layered"] and set(trees["kept"]["nodes"]) == {"a", "a/x", "a/y"}


def test_a_hardlink_to_a_lower_layer_needs_the_merge(tmp_path: Path) -> None:
    tar = tmp_path / "layer.tar"
    with LayerTar(tar) as layer:
        layer.hardlink("b", "a")  # "a" is a file of a layer below
    with pytest.raises(LayerNeedsMerge, match="hardlink /b points to /a"), open(os.devnull, "wb") as out:
        overlay_layer(LayerStream("sha256:l", lambda: opened(tar)), out)


def _layer(tmp: Path, name: str, files: dict[str, bytes], whiteouts: tuple[str, ...] = ()) -> Any:
    tar = tmp / f"{name}.tar"
    with LayerTar(tar) as layer:
        for path, data in files.items():
            folder = path.rpartition("/")[0]
            if folder:
                layer.directory(folder)
            layer.file(path, data)
        for path in whiteouts:
            layer.whiteout(path)
    return make_layer(tar, tmp)


def layered_import(workspace: Workspace, uri: str, **env: str) -> subprocess.CompletedProcess[str]:
    """What a Slurm step's import does (slurm/step.py): the image in place, here layered."""
    code = ("import sys; from pathlib import Path; from hydria.config import load_settings; "
            "from hydria.image.importer import import_image; "
            "print(import_image(sys.argv[1], load_settings(), output='step.sqsh', in_place=True, cwd=Path.cwd()))")
    return run_as(workspace.user, [sys.executable, "-c", code, uri], cwd=workspace.out,
                  env=workspace.env(**{"HYDRIA_LAYERED_IMAGES": "y", **env}))


def test_a_hardlink_to_what_the_layer_does_not_have_is_refused_by_both_imports(
        busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path) -> None:
    """A layer's first entry of a path is the one that counts: a file ``a``, then a folder ``a``
    and ``a/x`` below it, has no ``a/x``, so a hardlink ``b`` to it points at nothing. The one-file
    import and the layered one (which merges such a layer, as the one-file import does) refuse the
    image with the same error and keep nothing (Hypothesis found the layer)."""
    tmp_path.chmod(0o755)
    tar = tmp_path / "odd.tar"
    with LayerTar(tar) as layer:
        layer.file("a", "one")
        layer.directory("a")
        layer.file("a/x", "one")
        layer.hardlink("b", "a/x")
    repository = f"hydria/oddlink{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, make_layer(tar, tmp_path)], busybox.image.config)], registry.address,
         repository, "latest", workspace.root)
    uri = f"docker://{registry.address}#{repository}"
    one_file = workspace.run("import", "-o", "odd.sqsh", uri)
    layered = layered_import(workspace, uri)
    message = "hardlink /b points to /a/x, which is not a file of the image"
    assert one_file.returncode == 1 and f"[ERROR] {message}" in one_file.stderr, one_file.stderr
    assert "Traceback" not in one_file.stderr
    assert layered.returncode == 1 and f"UnsafeLayer: {message}" in layered.stderr, layered.stderr  # the API raises it
    assert list(workspace.out.iterdir()) == []
    kept = workspace.cache / f"images.{workspace.user.uid}"
    assert not kept.exists() or [path for path in kept.iterdir() if path.suffix == ".layers"] == []


def test_a_layer_image_written_through_a_link_is_squashed_again(busybox: PublishedImage, registry: Registry,
                                                                  workspace: Workspace, tmp_path: Path) -> None:
    """Hydria links the cache's layer images where the user writes (a build's .hydria-layers, a
    container's folder): ``cp`` onto such a link fails (they are read-only), and one written to
    all the same (root ignores the mode) is never used again: the next import squashes it anew."""
    tmp_path.chmod(0o755)
    data = _layer(tmp_path, "data", {"opt/data/file": b"mine\n"})
    repository = f"hydria/linked{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, data], busybox.image.config)], registry.address, repository, "v1",
         workspace.root)
    uri = f"docker://{registry.address}#{repository}:v1"
    first = layered_import(workspace, uri)
    assert first.returncode == 0, first.stderr
    layered = Path(first.stdout.strip())
    top = layered.parent / layered.read_text().splitlines()[-1]
    assert stat.S_IMODE(top.stat().st_mode) == 0o444
    link = workspace.out / "link.sqsh"
    os.link(top, link)  # as create and build -t link it
    overwrite = run_as(workspace.user, ["cp", "/etc/hostname", str(link)])
    assert overwrite.returncode != 0 and "Permission denied" in overwrite.stderr
    with open(link, "r+b") as handle:  # root writes all the same: the same bytes, a new modification time
        handle.write(handle.read(1))
    again = layered_import(workspace, uri)
    assert again.returncode == 0, again.stderr
    assert f"Not using the layer image {top}: it was written to after hydria made it" in again.stderr
    assert top.stat().st_ino != link.stat().st_ino and stat.S_IMODE(top.stat().st_mode) == 0o444
    shown = workspace.run("start", str(layered), "cat", "/opt/data/file")
    assert shown.returncode == 0 and shown.stdout == "mine\n", shown.stderr


def test_a_new_version_squashes_only_its_new_layers(busybox: PublishedImage, registry: Registry,
                                                    workspace: Workspace, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    base = busybox.image.layers
    data = _layer(tmp_path, "data", {"opt/data/old": b"old\n", "opt/data/kept": b"kept\n"})
    update = _layer(tmp_path, "update", {"opt/data/new": os.urandom(3 << 20)}, whiteouts=("opt/data/old",))
    repository = f"hydria/layered{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin:/usr/bin"]}
    push([Image([*base, data], config)], registry.address, repository, "v1", workspace.root)
    push([Image([*base, data, update], config)], registry.address, repository, "v2", workspace.root)
    uri = f"docker://{registry.address}#{repository}"

    first = layered_import(workspace, f"{uri}:v1")
    assert first.returncode == 0, first.stderr
    v1 = Path(first.stdout.strip())
    assert v1.suffix == ".layers" and v1.parent == workspace.cache / f"images.{workspace.user.uid}", v1
    v1_layers = v1.read_text().splitlines()[1:]
    assert len(v1_layers) == len(base) + 2  # the image's layers and the runtime files above them
    inodes = {name: (v1.parent / name).stat().st_ino for name in v1_layers}

    second = layered_import(workspace, f"{uri}:v2")
    assert second.returncode == 0, second.stderr
    v2 = Path(second.stdout.strip())
    v2_layers = v2.read_text().splitlines()[1:]
    assert v2_layers[:-2] == v1_layers[:-1], "the shared layers are the same layer images"
    assert {name: (v2.parent / name).stat().st_ino for name in v2_layers[:-2]} == \
        {name: inodes[name] for name in v1_layers[:-1]}, "and were not squashed again"
    assert v2_layers[-2] not in v1_layers and v2_layers[-1] not in v1_layers

    before = sorted(v2.parent.iterdir())
    again = layered_import(workspace, f"{uri}:v2")
    assert again.returncode == 0 and Path(again.stdout.strip()) == v2, again.stderr
    assert sorted(v2.parent.iterdir()) == before, "the kept layered image, nothing squashed"

    shown = run_as(workspace.user, [workspace.hydria, "start", str(v2), "sh", "-c",
                                    "ls /opt/data; wc -c < /opt/data/new; head -1 /etc/rc"], env=workspace.env())
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:3] == ["kept", "new", str(3 << 20)], shown.stdout
    assert f"hydria-provenance: {uri}:v2" in shown.stdout
    digest = run_as(workspace.user, [workspace.hydria, "digest", f"{uri}:v2"], env=workspace.env()).stdout.strip()
    recorded = run_as(workspace.user, [workspace.hydria, "verify", "--json", str(v2)], env=workspace.env())
    assert recorded.returncode == 0, recorded.stderr  # the top layer's /etc/rc; no policy: nothing to check
    assert json.loads(recorded.stdout) == {"image": str(v2), "reference": f"{uri}:v2", "digest": digest,
                                           "rule": None, "signed": None}
    started = run_as(workspace.user, [workspace.hydria, "start", str(v1), "cat", "/opt/data/old"], env=workspace.env())
    assert started.returncode == 0 and started.stdout == "old\n", started.stderr


def test_a_volume_the_layers_lack_is_made_at_start(busybox: PublishedImage, registry: Registry,
                                                     workspace: Workspace) -> None:
    """A layered image holds only what its layers made (image builders write no folder for a
    VOLUME): the start makes it (the fstab's x-create=dir), 0755 as a merged import adds it."""
    repository = f"hydria/volume{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"], "Volumes": {"/data/vol": {}}}
    push([Image(busybox.image.layers, config)], registry.address, repository, "v1", workspace.root)
    imported = layered_import(workspace, f"docker://{registry.address}#{repository}:v1")
    assert imported.returncode == 0, imported.stderr
    shown = workspace.run("start", imported.stdout.strip(), "sh", "-c",
                          "stat -c %a /data/vol; echo kept > /data/vol/file && cat /data/vol/file")
    assert shown.returncode == 0 and shown.stdout == "755\nkept\n", shown.stderr


# Where an image's WORKDIR may be, as its layers below leave it (_config_folder_layers): nowhere,
# below a folder of a lower layer with a mode of its own, in a folder an upper layer deleted, there
# already, below a symlink.
WORKDIRS = ("/work/dir", "/opt/app/run", "/gone/again", "/opt/app", "/link/sub")
SHOW_FOLDERS = ("pwd; for p in /work /work/dir /opt/app /opt/app/run /gone /gone/again /link /cache; do "
                "if [ -L $p ]; then echo $p link; elif [ -e $p ]; then stat -c '%n %a %F' $p; fi; done; echo in /gone: $(ls -A /gone 2> /dev/null)")


def _config_folder_layers(tmp: Path) -> list[Any]:
    tar = tmp / "folders.tar"
    with LayerTar(tar) as layer:
        layer.directory("opt")
        layer.directory("opt/app", mode=0o750)
        layer.directory("gone")
        layer.file("gone/old", b"old\n")
        layer.symlink("link", "/opt")
    return [make_layer(tar, tmp), _layer(tmp, "deleting", {"etc/upper": b"upper\n"}, whiteouts=("gone",))]


@pytest.mark.parametrize("workdir", WORKDIRS)
def test_config_folders_the_layers_lack_are_in_the_image(busybox: PublishedImage, registry: Registry,
                                                         workspace: Workspace, tmp_path: Path, workdir: str) -> None:
    """A WORKDIR and a VOLUME that no layer holds are folders of a layered image as of the merged
    one (mode 0755, the folders on their way as the layers have them, nothing below a symlink),
    so that a start, read-only, changes to its WORKDIR."""
    tmp_path.chmod(0o755)
    repository = f"hydria/folders{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"], "WorkingDir": workdir, "Volumes": {"/cache": {}}}
    push([Image([*busybox.image.layers, *_config_folder_layers(tmp_path)], config)], registry.address, repository,
         "v1", workspace.root)
    uri = f"docker://{registry.address}#{repository}:v1"
    layered = layered_import(workspace, uri)
    assert layered.returncode == 0, layered.stderr
    assert Path(layered.stdout.strip()).read_bytes().startswith(b"hydria layered image"), "kept layered"
    merged = workspace.run("import", "-o", "merged.sqsh", uri)
    assert merged.returncode == 0, merged.stderr
    layered_shown, merged_shown = (workspace.run("start", image, "sh", "-c", SHOW_FOLDERS)
                                   for image in (layered.stdout.strip(), "merged.sqsh"))
    assert (layered_shown.returncode, layered_shown.stdout) == (merged_shown.returncode, merged_shown.stdout), \
        (layered_shown.stderr, merged_shown.stderr)
    if workdir == "/link/sub":  # as enroot's: no folder below a link, and a read-only root
        assert merged_shown.returncode != 0 and "can't cd" in merged_shown.stderr
        return
    assert merged_shown.returncode == 0, merged_shown.stderr
    lines = merged_shown.stdout.splitlines()
    assert lines[0] == workdir
    assert f"{workdir} 755 directory" in lines or workdir == "/opt/app"
    assert "/opt/app 750 directory" in lines and "/link link" in lines and "/cache 755 directory" in lines
    assert lines[-1] == f"in /gone:{' again' if workdir == '/gone/again' else ''}", "the upper layer's deletion holds"


def test_evicted_images_take_only_their_own_layer_images(busybox: PublishedImage, registry: Registry,
                                                         workspace: Workspace, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    base = busybox.image.layers
    repository = f"hydria/evict{uuid.uuid4().hex[:12]}"
    for tag in ("one", "two"):
        own = _layer(tmp_path, tag, {f"opt/{tag}": tag.encode()})
        push([Image([*base, own], {"Cmd": ["/bin/sh"]})], registry.address, repository, tag, workspace.root)
    uri = f"docker://{registry.address}#{repository}"
    one = layered_import(workspace, f"{uri}:one", HYDRIA_CACHE_IMAGES="1")
    assert one.returncode == 0, one.stderr
    one_layers = Path(one.stdout.strip()).read_text().splitlines()[1:]
    two = layered_import(workspace, f"{uri}:two", HYDRIA_CACHE_IMAGES="1")
    assert two.returncode == 0, two.stderr
    two_path = Path(two.stdout.strip())
    two_layers = two_path.read_text().splitlines()[1:]
    kept = workspace.cache / f"images.{workspace.user.uid}"
    assert not Path(one.stdout.strip()).exists(), "the least recently used image was evicted"
    layer_files = {path.name for path in kept.iterdir() if path.name.startswith("layer-")}
    assert layer_files == set(two_layers), "its own layer images went with it, the shared ones stayed"
    assert set(one_layers) & set(two_layers) == set(two_layers[:len(base)])


def test_a_named_container_keeps_its_layers(busybox: PublishedImage, registry: Registry,
                                            workspace: Workspace, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    old = _layer(tmp_path, "old", {"opt/old": b"old\n"})
    own = _layer(tmp_path, "own", {"opt/own": b"own\n"}, whiteouts=("opt/old",))
    repository = f"hydria/named{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, old, own], {"Cmd": ["/bin/sh"]})], registry.address, repository, "v1",
         workspace.root)
    imported = layered_import(workspace, f"docker://{registry.address}#{repository}:v1")
    assert imported.returncode == 0, imported.stderr
    stack = imported.stdout.strip()
    assert workspace.run("create", "--name", "layered", stack).returncode == 0
    unpacked = workspace.run("create", "--unpack", "--name", "unpacked", stack)  # the merged tree, as a start shows
    assert unpacked.returncode == 0, unpacked.stderr
    rootfs = workspace.root / "data" / "unpacked" / "rootfs"
    assert sorted(path.name for path in (rootfs / "opt").iterdir()) == ["own"], "the deletion holds, unmarked"
    assert [path.name for path in (workspace.root / "data" / "unpacked").iterdir()] == ["rootfs"], "nothing else left there"
    shown = workspace.run("start", "unpacked", "sh", "-c", "cat /opt/own; head -1 /etc/rc")
    assert shown.returncode == 0 and shown.stdout.startswith("own\n"), shown.stderr
    bundled = workspace.run("bundle", "-o", "layered.run", stack)  # its layer images merged into the bundle
    assert bundled.returncode == 0, bundled.stderr
    assert sorted(path.name for path in workspace.out.iterdir()) == ["layered.run"], "nothing else left there"
    (workspace.root / "tmp").mkdir(mode=0o700)
    os.chown(workspace.root / "tmp", workspace.user.uid, workspace.user.gid)
    ran = run_as(workspace.user, [str(workspace.out / "layered.run"), "cat", "/opt/own"], cwd=workspace.out,
                 env={"TMPDIR": str(workspace.root / "tmp")})
    assert ran.returncode == 0 and ran.stdout == "own\n", ran.stderr
    for path in Path(stack).parent.iterdir():
        path.unlink()  # the cache emptied: the container has its own links to the layers
    shown = workspace.run("start", "--rw", "layered", "sh", "-c", "cat /opt/own; echo more > /opt/own")
    assert shown.returncode == 0 and shown.stdout == "own\n", shown.stderr
    again = workspace.run("start", "layered", "cat", "/opt/own")
    assert again.returncode == 0 and again.stdout == "more\n", again.stderr


def test_a_damaged_layered_image_is_named(workspace: Workspace, tmp_path: Path) -> None:
    folder = workspace.out
    (folder / "broken.layers").write_bytes(layered_text(["gone.sqsh"]))
    (folder / "broken.layers").chmod(0o644)
    started = workspace.run("start", str(folder / "broken.layers"), "true")
    assert started.returncode != 0 and "gone.sqsh" in started.stderr and "Traceback" not in started.stderr
    (folder / "escape.layers").write_bytes(b"hydria layered image 1\n../../etc/passwd\n")
    started = workspace.run("start", str(folder / "escape.layers"), "true")
    assert started.returncode != 0 and "layered image" in started.stderr and "Traceback" not in started.stderr


def test_a_layer_is_written_in_the_overlays_format(tmp_path: Path) -> None:
    """The writer's own output: deletions as 0/0 devices, opaque folders marked, folders last."""
    tar = tmp_path / "layer.tar"
    write_layer(tar, [("file", "a/x", "one"), ("whiteout", "b/x"), ("opaque", "a/c")])
    out = tmp_path / "out.tar"
    with out.open("wb") as handle:
        overlay_layer(LayerStream("sha256:l", lambda: opened(tar)), handle)
        end_archive(handle)
    with tarfile.open(out) as written:
        members = {m.name: m for m in written.getmembers()}
    assert members["b/x"].ischr() and (members["b/x"].devmajor, members["b/x"].devminor) == (0, 0)
    assert members["a/c"].pax_headers.get("SCHILY.xattr.user.overlay.opaque") == "y"
    assert ".wh.x" not in " ".join(members) and list(members)[-1] in ("a", "b", "a/c")


def _old_and_new(busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path,
                 name: str) -> str:
    """A repository of the registry whose tags "old" and "new" are busybox with a layer of their
    own (``/opt/old``, ``/opt/new``: 1 MiB each); its docker:// reference, without a tag."""
    tmp_path.chmod(0o755)
    repository = f"hydria/{name}{uuid.uuid4().hex[:12]}"
    for tag in ("old", "new"):
        own = _layer(tmp_path, tag, {f"opt/{tag}": os.urandom(1 << 20)})
        push([Image([*busybox.image.layers, own], {"Cmd": ["/bin/sh"]})], registry.address, repository, tag,
             workspace.root)
    return f"docker://{registry.address}#{repository}"


@pytest.mark.parametrize("fault", ["replaced", "removed", "truncated"])
def test_a_layer_image_changed_under_a_running_container(fault: str, busybox: PublishedImage, registry: Registry,
                                                         workspace: Workspace, tmp_path: Path) -> None:
    """A layer image of a running container replaced (a new file renamed over it), removed, or
    cut short in place: the container goes on reading the file it started with, or gets an I/O
    error for the bytes that are gone; it never hangs. The next start names the layer image."""
    uri, images = _old_and_new_imported(busybox, registry, workspace, tmp_path, "underneath")
    layer = images["old"].parent / images["old"].read_text().splitlines()[-2]  # the layer of /opt/old
    other = images["new"].parent / images["new"].read_text().splitlines()[-2]
    uncached = {"HYDRIA_READ_CACHE_SIZE": "0"}  # every byte through the reader
    expected = workspace.run("start", str(images["old"]), "sha256sum", "/opt/old", **uncached)
    assert expected.returncode == 0, expected.stderr
    signal_folder = workspace.root / "signal"
    signal_folder.mkdir(mode=0o777)
    signal_folder.chmod(0o777)
    script = ("head -c 4096 /opt/old > /dev/null && echo ready && "
              "while [ ! -e /signal/go ]; do sleep 0.1; done; sha256sum /opt/old")
    container = workspace.popen("start", "--mount", f"{signal_folder}:/signal:none:x-create=dir,bind", str(images["old"]),
                                "sh", "-c", script, **uncached)
    assert container.stdout is not None
    assert container.stdout.readline() == "ready\n", container.communicate(timeout=30)
    if fault == "replaced":
        shutil.copyfile(other, layer.with_name("replacement"))
        os.rename(layer.with_name("replacement"), layer)
    elif fault == "removed":
        layer.unlink()
    else:
        os.truncate(layer, layer.stat().st_size // 2)
    (signal_folder / "go").touch()
    output, errors = container.communicate(timeout=60)
    if fault == "truncated":
        assert container.returncode != 0 and "I/O error" in errors, (output, errors)
    else:
        assert container.returncode == 0 and output == expected.stdout, errors
    assert "Traceback" not in errors
    if fault != "replaced":
        again = workspace.run("start", str(images["old"]), "true", **uncached)
        assert again.returncode != 0 and layer.name in again.stderr and "Traceback" not in again.stderr, again.stderr
        remade = layered_import(workspace, f"{uri}:old")  # the next import makes the layer image again
        assert remade.returncode == 0, remade.stderr
        shown = workspace.run("start", str(images["old"]), "sha256sum", "/opt/old", **uncached)
        assert shown.returncode == 0 and shown.stdout == expected.stdout, shown.stderr


def _old_and_new_imported(busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path,
                          name: str) -> tuple[str, dict[str, Path]]:
    """:func:`_old_and_new`, both tags imported as a Slurm step imports them: the reference and
    the layered image of each tag."""
    uri = _old_and_new(busybox, registry, workspace, tmp_path, name)
    images = {}
    for tag in ("old", "new"):
        imported = layered_import(workspace, f"{uri}:{tag}")
        assert imported.returncode == 0, imported.stderr
        images[tag] = Path(imported.stdout.strip())
    return uri, images


def test_cache_prune_keeps_the_layers_an_image_needs(busybox: PublishedImage, registry: Registry,
                                                     workspace: Workspace, tmp_path: Path) -> None:
    """``hydria cache prune`` weighs a layered image with the layer images only it names; a
    layer image that another kept image names stays until the last of them goes."""
    uri = _old_and_new(busybox, registry, workspace, tmp_path, "prune")
    paths = {}
    for tag, age in (("old", 7200), ("new", 3600)):
        imported = layered_import(workspace, f"{uri}:{tag}")
        assert imported.returncode == 0, imported.stderr
        paths[tag] = Path(imported.stdout.strip())
        for path in [paths[tag], *(paths[tag].parent / name for name in paths[tag].read_text().splitlines()[1:])]:
            os.utime(path, (time.time() - age, time.time() - age))
    kept = paths["new"].parent
    listed = json.loads(workspace.run("cache", "list", "--json").stdout)
    on_disk = sum(path.stat().st_size for path in kept.iterdir() if path.name.endswith((".sqsh", ".layers")))
    assert listed["images"] == 2 and listed["image_bytes"] == on_disk
    pruned = workspace.run("cache", "prune", "--to", str(listed["blob_bytes"] + on_disk - 1))  # blobs: just used
    assert pruned.returncode == 0, pruned.stderr
    assert not paths["old"].exists() and paths["new"].exists(), pruned.stdout
    assert {path.name for path in kept.glob("layer-*")} == set(paths["new"].read_text().splitlines()[1:])
    started = workspace.run("start", str(paths["new"]), "ls", "/opt")
    assert started.returncode == 0 and started.stdout == "new\n", started.stderr
    assert workspace.run("cache", "prune").returncode == 0
    assert paths["new"].exists(), "the start used it just now"
    for path in kept.iterdir():
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    assert workspace.run("cache", "prune").returncode == 0
    assert not any(kept.glob("layer-*")) and not paths["new"].exists()


def test_a_rebuild_squashes_only_its_changed_steps(debian: PublishedImage, workspace: Workspace) -> None:
    """``hydria build -t`` with layered images: the base image's layer images are the image
    cache's, shared with imports; a rebuild adds only its changed step's layer image; the output
    starts, names a container, and shows the tree of the same build written as one file."""
    context = workspace.out / "context"
    context.mkdir()
    dockerfile = context / "Dockerfile"

    def build(version: str, *args: str) -> str:
        dockerfile.write_text(f"""FROM {debian.registry}/{debian.repository}:{debian.tag}
RUN rm -r /usr/share/doc && mkdir -p /opt/kept && echo kept > /opt/kept/file
RUN mkdir /app && echo {version} > /app/version
""")
        for path in (context, dockerfile):
            os.chown(path, workspace.user.uid, workspace.user.gid)
        result = workspace.run("build", *args, str(context), timeout=600, HYDRIA_LAYERED_IMAGES="y")
        assert result.returncode == 0, result.stderr
        return result.stderr

    kept = workspace.cache / f"images.{workspace.user.uid}"
    layers = workspace.out / ".hydria-layers"
    first = build("1", "-t", "app:1")
    assert "as layer images" in first and "a layered image" in first, first
    app1 = workspace.out / "app+1.sqsh"
    assert app1.read_bytes().startswith(b"hydria layered image 1\n")
    cached = {path.name for path in kept.glob("layer-*.sqsh")}
    names1 = [name.removeprefix(".hydria-layers/") for name in app1.read_text().splitlines()[1:]]
    assert set(names1) <= cached and {path.name for path in layers.glob("layer-*")} == set(names1)
    assert {(layers / name).stat().st_ino for name in names1} == {(kept / name).stat().st_ino for name in names1}

    second = build("2", "-t", "app:2")
    assert second.count(" DONE ") == 1 and second.count("CACHED") == 1, second
    app2 = workspace.out / "app+2.sqsh"
    names2 = [name.removeprefix(".hydria-layers/") for name in app2.read_text().splitlines()[1:]]
    made = {path.name for path in kept.glob("layer-*.sqsh")} - cached
    assert made == {names2[-2]}, "the changed step's layer image, nothing else squashed"
    assert names2[:-2] == names1[:-2] and names2[-1] == names1[-1]

    shown = workspace.run("start", str(app2), "sh", "-c", "cat /app/version /opt/kept/file; ls /usr/share/doc")
    assert shown.stdout == "2\nkept\n" and shown.returncode != 0, shown.stderr
    assert workspace.run("start", str(app1), "cat", "/app/version").stdout == "1\n"
    assert workspace.run("create", "--name", "built", str(app2)).returncode == 0
    assert workspace.run("start", "built", "cat", "/app/version").stdout == "2\n"

    build("3", "-t", "app:1")  # replaces app+1.sqsh: its old step layer goes from the folder
    names3 = [name.removeprefix(".hydria-layers/") for name in app1.read_text().splitlines()[1:]]
    assert {path.name for path in layers.glob("layer-*")} == set(names2) | set(names3)
    assert names1[-2] not in names3

    build("2", "-o", "merged.sqsh")
    assert (workspace.out / "merged.sqsh").read_bytes()[:4] == b"hsqs", "-o writes one self-contained file"
    scratch = workspace.out / "scratch"
    scratch.mkdir(mode=0o777)
    scratch.chmod(0o777)
    trees = view(workspace.user, {"merged": workspace.out / "merged.sqsh", "layered": app2}, scratch)
    assert trees["layered"] == trees["merged"]


def test_a_build_in_its_context_leaves_the_layer_folder_out(busybox: PublishedImage, workspace: Workspace) -> None:
    context = workspace.out / "project"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {busybox.registry}/{busybox.repository}:{busybox.tag}\n"
                                        "COPY Dockerfile /ctx/\nCOPY . /all/\n")
    for path in (context, context / "Dockerfile"):
        os.chown(path, workspace.user.uid, workspace.user.gid)
    for _ in range(2):  # the second finds the first's layer folder in the context
        built = workspace.run("build", "-t", "app:1", ".", cwd=context, timeout=600, HYDRIA_LAYERED_IMAGES="y")
        assert built.returncode == 0, built.stderr
    assert (context / ".hydria-layers").is_dir()
    listed = workspace.run("start", str(context / "app+1.sqsh"), "ls", "-a", "/all")
    assert listed.returncode == 0 and ".hydria-layers" not in listed.stdout, listed.stdout


def test_a_build_killed_at_any_point_of_its_output_leaves_a_whole_image(busybox: PublishedImage,
                                                                        workspace: Workspace, tmp_path: Path) -> None:
    """``hydria build -t`` killed (SIGKILL, by strace at its Nth link, rename or removal) while it
    replaces a layered output: the output is the old image or the new one, whole (each layer image
    it names is there), and starts; the next build finishes and leaves nothing of the killed one."""
    context, site, warm = (workspace.out / name for name in ("context", "site", "warm"))
    for folder in (context, site, warm):
        folder.mkdir()
        os.chown(folder, workspace.user.uid, workspace.user.gid)
    calls = "link,linkat,unlink,unlinkat,rename,renameat,renameat2"

    def build(version: str, cwd: Path, killed_at: int | None = None) -> int:
        dockerfile = context / "Dockerfile"
        dockerfile.write_text(f"FROM {busybox.registry}/{busybox.repository}:{busybox.tag}\n"
                              f"RUN echo {version} > /version\n")
        os.chown(dockerfile, workspace.user.uid, workspace.user.gid)
        inject = ["strace", "-qq", "-o", "/dev/null", "-e", f"trace={calls}",
                  "-e", f"inject={calls}:signal=KILL:when={killed_at}"] if killed_at else []
        return run_as(workspace.user, [*inject, workspace.hydria, "build", "-t", "app:1", str(context)],
                      env=workspace.env(), cwd=cwd, timeout=600).returncode

    assert build("2", warm) == 0  # its step and layer image made: a killed build only writes the output
    assert build("1", site) == 0
    saved = tmp_path / "saved"
    shutil.copytree(site, saved, symlinks=True)
    image = site / "app+1.sqsh"

    def named() -> set[str]:
        return {name.removeprefix(".hydria-layers/") for name in image.read_text().splitlines()[1:]}

    killed = 0
    for point in range(1, 80):
        shutil.rmtree(site)
        shutil.copytree(saved, site, symlinks=True)
        subprocess.run(["chown", "-R", f"{workspace.user.uid}:{workspace.user.gid}", str(site)], check=True)
        if build("2", site, point) == 0:
            break  # fewer calls than that: every point was tried
        killed += 1
        assert all((site / ".hydria-layers" / name).is_file() for name in named()), point
        shown = workspace.run("start", str(image), "cat", "/version")
        assert shown.returncode == 0 and shown.stdout in ("1\n", "2\n"), (point, shown.stderr)
        assert build("2", site) == 0, point
        assert workspace.run("start", str(image), "cat", "/version").stdout == "2\n", point
        assert sorted(path.name for path in site.iterdir()) == [".hydria-layers", "app+1.sqsh"], point
        assert {path.name for path in (site / ".hydria-layers").iterdir()} == named() | {".lock"}, point
    assert killed >= 3, "the output's links, its rename and the removal of the old step's layer image at least"


def test_the_store_keeps_layered_images_that_every_user_starts(busybox: PublishedImage, registry: Registry,
                                                                store: Path, store_workspace: Workspace,
                                                                workspace: Workspace, tmp_path: Path) -> None:
    """The store's owner imports layered images (HYDRIA_LAYERED_IMAGES): a new version squashes
    only its new layers; users' steps start the layered entry in place, and nothing of it can be
    changed by them; a prune takes an image with the layer images only it names."""
    tmp_path.chmod(0o755)
    base = busybox.image.layers
    data = _layer(tmp_path, "data", {"opt/data/kept": b"kept\n"})
    update = _layer(tmp_path, "update", {"opt/data/new": os.urandom(3 << 20)})
    repository = f"hydria/storelayers{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin:/usr/bin"]}
    push([Image([*base, data], config)], registry.address, repository, "v1", store_workspace.root)
    push([Image([*base, data, update], config)], registry.address, repository, "v2", store_workspace.root)
    uri = f"docker://{registry.address}#{repository}"
    env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_LAYERED_IMAGES": "y"}
    assert store_workspace.run("store", "init", **env).returncode == 0

    entries = {}
    for tag in ("v1", "v2"):
        imported = store_workspace.run("store", "import", f"{uri}:{tag}", **env)
        assert imported.returncode == 0, imported.stderr
        entries[tag] = Path(imported.stdout.strip())
    names = {tag: path.read_text().splitlines()[1:] for tag, path in entries.items()}
    for tag, path in entries.items():
        assert path.suffix == ".layers" and path.parent == store / "images", path
        for file in [path, *(path.parent / name for name in names[tag])]:
            info = file.stat()
            assert (info.st_uid, info.st_mode & 0o777) == (store_workspace.user.uid, 0o644), file
    assert names["v2"][:-2] == names["v1"][:-1], "v2 names the layer images v1 has"
    squashed = {path.name for path in (store / "images").glob("layer-*")}
    assert squashed == set(names["v1"]) | set(names["v2"]), "one layer image per layer"

    stepped = layered_import(workspace, f"{uri}:v2", HYDRIA_STORE_PATH=str(store), HYDRIA_LAYERED_IMAGES="n")
    assert stepped.returncode == 0, stepped.stderr
    assert stepped.stdout.strip() == str(entries["v2"]), "a step starts the store's entry in place"
    shown = workspace.run("start", str(entries["v2"]), "sh", "-c", "cat /opt/data/kept; wc -c < /opt/data/new")
    assert shown.returncode == 0 and shown.stdout.split() == ["kept", str(3 << 20)], shown.stderr
    for attack in (f"echo x >> {entries['v2']}", f"echo x >> {store}/images/{names['v2'][0]}",
                   f"rm -f {store}/images/{names['v2'][-1]}"):
        assert run_as(workspace.user, ["sh", "-c", attack]).returncode != 0, attack
    copied = workspace.run("import", "-o", "mine.sqsh", f"{uri}:v2", HYDRIA_STORE_PATH=str(store))
    assert copied.returncode == 0 and "image store" not in copied.stderr, "-o writes one self-contained file"
    assert (workspace.out / "mine.sqsh").read_bytes()[:4] == b"hsqs"

    listed = {e["path"]: e["size"] for e in json.loads(store_workspace.run("store", "list", "--json", **env).stdout)}
    assert listed == {str(path): path.stat().st_size + sum((store / "images" / name).stat().st_size
                                                           for name in set(names[tag]))
                      for tag, path in entries.items()}

    for path in [entries["v1"], *(store / "images" / name for name in names["v1"])]:
        os.utime(path, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    pruned = store_workspace.run("store", "prune", "--to", "0", **env)
    assert pruned.returncode == 0, pruned.stderr
    assert f"removed {entries['v1']}" in pruned.stdout and entries["v2"].exists(), pruned.stdout
    assert {path.name for path in (store / "images").glob("layer-*")} == set(names["v2"]), \
        "v1's own layer image went with it, the shared ones stayed"

    lost = store / "images" / names["v2"][-2]
    for damage in (lost.unlink, lambda: os.truncate(lost, lost.stat().st_size // 2)):  # a hand, a disk error
        damage()
        missing = layered_import(workspace, f"{uri}:v2", HYDRIA_STORE_PATH=str(store))
        assert missing.returncode == 0 and missing.stdout.strip() != str(entries["v2"]), missing.stderr
        (workspace.out / "step.sqsh").unlink(missing_ok=True)  # the user's own (their cache had it from -o)
        repaired = store_workspace.run("store", "import", f"{uri}:v2", **env)
        assert repaired.returncode == 0 and repaired.stdout.strip() == str(entries["v2"]), repaired.stderr
        assert "Not using" in repaired.stderr and ("is missing" in repaired.stderr or "is truncated" in repaired.stderr)
        layered_entry_works(workspace, entries["v2"])


def two_versions(store_workspace: Workspace, registry: Registry, busybox: PublishedImage, tmp_path: Path,
                 size: int = 1 << 20) -> str:
    """``v1`` (busybox and a layer) and ``v2`` (the same and one more of ``size`` random bytes),
    pushed; their repository's URI."""
    tmp_path.chmod(0o755)
    data = _layer(tmp_path, "data", {"opt/data/kept": b"kept\n"})
    update = _layer(tmp_path, "update", {"opt/data/new": os.urandom(size)})
    repository = f"hydria/storefaults{uuid.uuid4().hex[:12]}"
    config = {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin:/usr/bin"]}
    push([Image([*busybox.image.layers, data], config)], registry.address, repository, "v1", store_workspace.root)
    push([Image([*busybox.image.layers, data, update], config)], registry.address, repository, "v2",
         store_workspace.root)
    return f"docker://{registry.address}#{repository}"


def slow_squash(workspace: Workspace, seconds: int) -> str:
    """A PATH whose ``tar2sqfs`` waits ``seconds`` before the real one."""
    folder = workspace.root / "slow-bin"
    folder.mkdir(mode=0o755)
    (folder / "tar2sqfs").write_text(f'#!/bin/sh\nsleep {seconds}\nexec /usr/bin/tar2sqfs "$@"\n')
    (folder / "tar2sqfs").chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def wait_for_layer_lock(store: Path) -> None:
    deadline = time.monotonic() + 60
    while not list((store / "locks").glob("layer-*.lock")):
        assert time.monotonic() < deadline, "no layer was being squashed"
        time.sleep(0.05)


def layered_entry_works(workspace: Workspace, entry: Path) -> None:
    """Every layer image that the store's layered ``entry`` names is there, and a user starts it."""
    assert entry.suffix == ".layers"
    assert all((entry.parent / name).is_file() for name in entry.read_text().splitlines()[1:])
    started = workspace.run("start", str(entry), "cat", "/opt/data/kept")
    assert started.returncode == 0 and started.stdout == "kept\n", started.stderr


def test_store_imports_of_versions_that_share_layers_squash_each_once(
        busybox: PublishedImage, registry: Registry, store: Path, store_workspace: Workspace,
        workspace: Workspace, tmp_path: Path) -> None:
    """Two nodes import two versions at once: a layer image that both need is squashed by one of
    them while the other waits for it (each layer image has its own lock in the store)."""
    uri = two_versions(store_workspace, registry, busybox, tmp_path)
    env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_LAYERED_IMAGES": "y"}
    assert store_workspace.run("store", "init", **env).returncode == 0
    first = store_workspace.popen("store", "import", f"{uri}:v1", PATH=slow_squash(store_workspace, 2), **env)
    wait_for_layer_lock(store)
    second = store_workspace.run("store", "import", f"{uri}:v2", **env)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    assert "which imports a layer (sha256:" in second.stderr, second.stderr
    entries = {"v1": Path(out.strip()), "v2": Path(second.stdout.strip())}
    names = {tag: path.read_text().splitlines()[1:] for tag, path in entries.items()}
    assert names["v2"][:-2] == names["v1"][:-1]
    for entry in entries.values():
        layered_entry_works(workspace, entry)
    assert list((store / "locks").iterdir()) == []


def test_a_killed_layered_store_import_leaves_nothing_half_made(
        busybox: PublishedImage, registry: Registry, store: Path, store_workspace: Workspace,
        workspace: Workspace, tmp_path: Path) -> None:
    """``kill -9`` while a layer image is squashed: no entry and no layer image appears, and the
    next import on the node takes both locks over at once."""
    uri = two_versions(store_workspace, registry, busybox, tmp_path)
    env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_LAYERED_IMAGES": "y"}
    assert store_workspace.run("store", "init", **env).returncode == 0
    killed = store_workspace.popen("store", "import", f"{uri}:v2", PATH=slow_squash(store_workspace, 300), **env)
    wait_for_layer_lock(store)
    subprocess.run(["pkill", "-KILL", "-u", store_workspace.user.name], check=False)
    killed.communicate(timeout=30)
    assert sorted(path.suffix for path in (store / "locks").iterdir()) == [".lock", ".lock"]  # the image's, a layer's
    assert not [path for path in (store / "images").iterdir()], "nothing half-made in sight"
    started = time.monotonic()
    again = store_workspace.run("store", "import", f"{uri}:v2", **env)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("is gone (killed)") == 2 and time.monotonic() - started < 60, again.stderr
    layered_entry_works(workspace, Path(again.stdout.strip()))
    assert list((store / "locks").iterdir()) == []


def test_a_store_disk_that_fills_during_a_layered_import_loses_nothing(
        busybox: PublishedImage, registry: Registry, store: Path, store_workspace: Workspace,
        workspace: Workspace, tmp_path: Path) -> None:
    """The store's disk has room for v1 and not for v2's new layer: the import of v2 fails with
    an error that names the disk; v1 stays whole, and nothing of v2 is in sight."""
    uri = two_versions(store_workspace, registry, busybox, tmp_path, size=8 << 20)
    env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_LAYERED_IMAGES": "y"}
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=6m,mode=0755,uid={store_workspace.user.uid}", "tmpfs",
                    str(store)], check=True)
    try:
        assert store_workspace.run("store", "init", **env).returncode == 0
        first = store_workspace.run("store", "import", f"{uri}:v1", **env)
        assert first.returncode == 0, first.stderr
        before = sorted((store / "images").iterdir())
        full = store_workspace.run("store", "import", f"{uri}:v2", **env)
        assert full.returncode != 0 and "Traceback" not in full.stderr
        assert "No space left on device" in full.stderr and str(store / "images") in full.stderr, full.stderr
        assert sorted((store / "images").iterdir()) == before and list((store / "locks").iterdir()) == []
        layered_entry_works(workspace, Path(first.stdout.strip()))
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)


def test_a_damaged_layer_image_in_the_cache_is_made_again(busybox: PublishedImage, registry: Registry,
                                                         workspace: Workspace, tmp_path: Path) -> None:
    """A kept layer image cut short (a full disk, a bad copy): the start says so, and the next
    import squashes that layer again instead of handing out the damaged image."""
    tmp_path.chmod(0o755)
    own = _layer(tmp_path, "own", {"opt/own": os.urandom(1 << 20)})
    repository = f"hydria/damaged{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, own], {"Cmd": ["/bin/sh"]})], registry.address, repository, "v1",
         workspace.root)
    uri = f"docker://{registry.address}#{repository}:v1"
    entry = Path(layered_import(workspace, uri).stdout.strip())
    layer = entry.parent / entry.read_text().splitlines()[-2]
    os.truncate(layer, layer.stat().st_size // 2)
    started = workspace.run("start", str(entry), "true")
    assert started.returncode != 0 and f"{layer} is truncated" in started.stderr, started.stderr
    again = layered_import(workspace, uri)
    assert again.returncode == 0 and Path(again.stdout.strip()) == entry, again.stderr
    shown = workspace.run("start", str(entry), "wc", "-c", "/opt/own")
    assert shown.returncode == 0 and shown.stdout.split()[0] == str(1 << 20), shown.stderr


def _marked_layers(tmp_path: Path) -> list[Any]:
    """Layers above busybox's that delete a file, make a folder opaque and hardlink a file."""
    lower = tmp_path / "lower.tar"
    with LayerTar(lower) as layer:
        layer.directory("opt")
        layer.directory("opt/app")
        for name in ("old", "kept", "gone"):
            layer.file(f"opt/app/{name}", f"{name}\n".encode(), mode=0o640, uid=7, gid=8)
        layer.directory("opt/cache")
        layer.file("opt/cache/stale", b"stale\n")
    upper = tmp_path / "upper.tar"
    with LayerTar(upper) as layer:
        layer.directory("opt")
        layer.directory("opt/app")
        layer.whiteout("opt/app/gone")
        layer.file("opt/app/old", b"new\n", mode=0o755)
        layer.hardlink("opt/app/twin", "opt/app/old")
        layer.directory("opt/cache")
        layer.opaque("opt/cache")
        layer.file("opt/cache/fresh", b"fresh\n")
    return [make_layer(lower, tmp_path), make_layer(upper, tmp_path)]


def _listing(image: Path) -> list[str]:
    """Every entry of a squashfs image but folders' own attributes (a layered image's runtime
    files imply /etc in a layer of their own): type, mode, owner, size, time and path."""
    lines = subprocess.run(["unsquashfs", "-lln", "-d", "", str(image)], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return sorted(line.split()[-1] if line.startswith("d") else line for line in lines if line.startswith(("d", "-", "l")))


def test_import_o_merges_the_stores_layered_image_without_a_download(
        busybox: PublishedImage, registry: Registry, store: Path, store_workspace: Workspace, workspace: Workspace,
        tmp_path: Path) -> None:
    """A user's ``import -o`` of an image that the store keeps layered gets one file made of the
    store's layer images, with the deletions, the opaque folder and the hardlink of its layers,
    as an import from the registry writes it, and no blob downloaded."""
    tmp_path.chmod(0o755)
    repository = f"hydria/mergelayers{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, *_marked_layers(tmp_path)], {"Cmd": ["/bin/sh"]})], registry.address,
         repository, "v1", store_workspace.root)
    uri = f"docker://{registry.address}#{repository}:v1"
    env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_LAYERED_IMAGES": "y"}
    assert store_workspace.run("store", "init", **env).returncode == 0
    imported = store_workspace.run("store", "import", uri, **env)
    assert imported.returncode == 0 and imported.stdout.strip().endswith(".layers"), imported.stderr
    fetched = registry.blob_fetches(repository)

    merged = workspace.run("import", "-o", "merged.sqsh", uri, HYDRIA_STORE_PATH=str(store))
    assert merged.returncode == 0, merged.stderr
    assert registry.blob_fetches(repository) == fetched, "nothing downloaded"
    assert "Merged the kept layered image" in merged.stderr
    direct = workspace.run("import", "-o", "direct.sqsh", uri, HYDRIA_CACHE_IMAGES="0")
    assert direct.returncode == 0, direct.stderr
    assert _listing(workspace.out / "merged.sqsh") == _listing(workspace.out / "direct.sqsh")
    shown = workspace.run("start", str(workspace.out / "merged.sqsh"), "sh", "-c",
                          "ls /opt/app; ls /opt/cache; cat /opt/app/twin; stat -c %h /opt/app/old")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["kept", "old", "twin", "fresh", "new", "2"], shown.stdout


def test_import_o_of_a_layered_image_whose_layer_image_is_gone_or_damaged_imports_it_again(
        busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path) -> None:
    """The cache's layered image (a Slurm step's) is merged for ``import -o``; where one of its
    layer images is missing, or damaged inside, the image is imported from the registry instead."""
    tmp_path.chmod(0o755)
    repository = f"hydria/mergegone{uuid.uuid4().hex[:12]}"
    push([Image([*busybox.image.layers, *_marked_layers(tmp_path)], {"Cmd": ["/bin/sh"]})], registry.address,
         repository, "v1", workspace.root)
    uri = f"docker://{registry.address}#{repository}:v1"
    stepped = layered_import(workspace, uri)
    assert stepped.returncode == 0, stepped.stderr
    layered = Path(stepped.stdout.strip())
    merged = workspace.run("import", "-o", "merged.sqsh", uri, HYDRIA_LAYERED_IMAGES="y")
    assert merged.returncode == 0 and "Merged the kept layered image" in merged.stderr, merged.stderr

    top = layered.parent / layered.read_text().splitlines()[-2]  # the layer image of the image's top layer
    times = top.stat()
    with open(top, "r+b") as handle:  # its size and superblock as they were: only reading it shows the damage
        handle.seek(96)
        handle.write(b"\xff" * (top.stat().st_size // 2))
    os.utime(top, ns=(times.st_atime_ns, times.st_mtime_ns))  # as a disk's damage, which changes no time
    damaged = workspace.run("import", "-o", "damaged.sqsh", uri, HYDRIA_LAYERED_IMAGES="y")
    assert damaged.returncode == 0, damaged.stderr
    assert f"cannot read the layer image {top}" in damaged.stderr, damaged.stderr
    assert "importing the image from its registry" in damaged.stderr, damaged.stderr
    top.unlink()
    gone = workspace.run("import", "-o", "gone.sqsh", uri, HYDRIA_LAYERED_IMAGES="y")
    assert gone.returncode == 0 and "Merged" not in gone.stderr, gone.stderr
    for name in ("damaged.sqsh", "gone.sqsh"):
        assert _listing(workspace.out / name) == _listing(workspace.out / "merged.sqsh"), name
    assert not [p.name for p in workspace.out.iterdir() if p.name.startswith(".")], "nothing half-written"


def test_a_prune_killed_at_any_removal_leaves_whole_images_and_the_next_finishes(
        busybox: PublishedImage, registry: Registry, workspace: Workspace, tmp_path: Path) -> None:
    """``hydria cache prune`` killed (SIGKILL, by strace at its Nth removal) at every point:
    each layered image left names only layer images that are there, and starts; the next prune
    ends where an uninterrupted one does."""
    _, paths = _old_and_new_imported(busybox, registry, workspace, tmp_path, "killprune")
    kept = paths["new"].parent
    saved = tmp_path / "saved"
    shutil.copytree(kept, saved)

    def age() -> None:  # what is left of the old image last used 2 hours ago, of the new one an hour ago
        for tag, seconds in (("old", 7200), ("new", 3600)):
            names = (saved / paths[tag].name).read_text().splitlines()[1:]
            for path in (paths[tag], *(kept / name for name in names)):
                if path.exists():
                    os.utime(path, (time.time() - seconds, time.time() - seconds))
    age()
    listed = json.loads(workspace.run("cache", "list", "--json").stdout)
    on_disk = sum(path.stat().st_size for path in kept.iterdir() if path.name.endswith((".sqsh", ".layers")))
    target = str(listed["blob_bytes"] + on_disk - 1)  # the old image goes, with the layer images it alone names

    def prune(killed_at: int | None) -> int:
        inject = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=unlink,unlinkat,rename,renameat,renameat2",
                  "-e", f"inject=unlink,unlinkat,rename,renameat,renameat2:signal=KILL:when={killed_at}"] \
            if killed_at else []
        return run_as(workspace.user, [*inject, workspace.hydria, "cache", "prune", "--to", target],
                      env=workspace.env(), cwd=workspace.out).returncode

    def restore() -> None:
        shutil.rmtree(kept)
        shutil.copytree(saved, kept)
        subprocess.run(["chown", "-R", f"{workspace.user.uid}:{workspace.user.gid}", str(kept)], check=True)
        age()

    assert prune(None) == 0
    finished = sorted(path.name for path in kept.iterdir())
    assert paths["new"].name in finished and paths["old"].name not in finished
    killed = 0
    for point in range(1, 50):
        restore()
        if prune(point) == 0:
            break  # fewer removals than that: every point was tried
        killed += 1
        for layered in kept.glob("*.layers"):
            names = layered.read_text().splitlines()[1:]
            assert all((kept / name).is_file() for name in names), (point, layered.name)
        assert workspace.run("start", str(paths["new"]), "ls", "/opt").stdout == "new\n", point
        age()  # the start used the layer images the two share
        assert prune(None) == 0
        assert sorted(path.name for path in kept.iterdir()) == finished, point
    assert killed >= 2, "the prune removes the image and a layer image at least"
