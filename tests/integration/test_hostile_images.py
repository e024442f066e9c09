"""Images whose config or layers try to reach the host (docs/security.md): crafted images served by
the test registry, imported and started as the unprivileged test user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.oci import Image, make_layer, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.tarbuild import LayerTar
from testbed.users import User
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

# A host directory the crafted images aim at; the images hold a directory of the same path.
HOST_TARGET = Path("/var/tmp/hydria-hostile-target")


@pytest.fixture
def host_target(test_user: User) -> Iterator[Path]:
    """The host directory, writable by the test user: a bind of it would let the image write there."""
    HOST_TARGET.mkdir(mode=0o755)
    (HOST_TARGET / "where").write_text("host\n")
    os.chown(HOST_TARGET, test_user.uid, test_user.gid)
    yield HOST_TARGET
    shutil.rmtree(HOST_TARGET)


@pytest.fixture(scope="module")
def hostile(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> dict[str, str]:
    """Crafted images pushed to the test registry; name -> docker:// URI."""
    work = image_workdir / "hostile"
    work.mkdir(exist_ok=True)
    base = busybox.image.layers[0]
    links = work / "links.tar"
    with LayerTar(links) as layer:
        layer.directory(str(HOST_TARGET))
        layer.file(f"{HOST_TARGET}/where", "image\n")
        layer.symlink("absolute", str(HOST_TARGET))
        layer.symlink("relative", "../../../../../../.." + str(HOST_TARGET))
        layer.directory("deep")
        layer.symlink("deep/up", "../../../../../..")
    link_layer = make_layer(links, work)
    identity = work / "identity.tar"
    with LayerTar(identity) as layer:  # the files every start writes, linked to the host's
        layer.directory(str(HOST_TARGET))
        layer.file(f"{HOST_TARGET}/where", "image\n")
        layer.symlink("etc/passwd", f"{HOST_TARGET}/where")
        layer.symlink("etc/group", "../../../../../.." + f"{HOST_TARGET}/group")
    identity_layer = make_layer(identity, work)
    uris = {}

    def publish(name: str, config: dict[str, Any], layers: int = 2) -> None:
        push([Image([base, link_layer][:layers], {**busybox.image.config, **config})], registry.address,
             f"hostile/{name}", "latest", work)
        uris[name] = f"docker://{registry.address}#hostile/{name}:latest"

    publish("linked-volumes", {"Volumes": {"/absolute": {}, "/relative": {}, f"/deep/up{HOST_TARGET}": {},
                                           f"/../../..{HOST_TARGET}": {}}})
    injected = f"/x\n{HOST_TARGET} /injected none bind,rw\n${{HOME}} /home-injected none rbind,rw\n/y"
    publish("injected-volume", {"Volumes": {injected: {}, f"/tab\t{HOST_TARGET}": {}, "/$HOME/${HOME}": {}}})
    publish("injected-env", {"Env": ["GOOD=1", "LINES=a\nHYDRIA_X=b\u2028INJECTED=c\x0bD=e"],
                             "Labels": {"label\nexec /bin/false": "x\n/bin/false"},
                             "WorkingDir": "/tmp/it's $(false)\n`false`"}, layers=1)
    publish("nul-in-env", {"Env": ["A=b\u0000c"]}, layers=1)
    push([Image([base, identity_layer], busybox.image.config)], registry.address, "hostile/linked-identity", "latest",
         work)
    uris["linked-identity"] = f"docker://{registry.address}#hostile/linked-identity:latest"
    publish("labels-list", {"Labels": ["a", "b"]}, layers=1)
    publish("entrypoint-number", {"Entrypoint": 5}, layers=1)
    return uris


@pytest.fixture(scope="module")
def wrong_shapes(registry: Registry, busybox: PublishedImage, image_workdir: Path) -> dict[str, str]:
    """Config documents that are not objects, or whose ``config`` is not one."""
    work = image_workdir / "shapes"
    work.mkdir(exist_ok=True)
    uris = {}
    for name, document in (("config-list", [1, 2]), ("config-string", {"config": "text"})):
        image = _RawConfigImage(busybox.image.layers, {}, document=document)
        push([image], registry.address, f"hostile/{name}", "latest", work)
        uris[name] = f"docker://{registry.address}#hostile/{name}:latest"
    return uris


class _RawConfigImage(Image):
    """An image whose config blob is ``document`` as it is."""

    def __init__(self, layers: Any, config: dict[str, Any], *, document: object) -> None:
        super().__init__(list(layers), config)
        self.document = document

    def config_blob(self, workdir: Path) -> Any:
        from testbed.oci import OCI_CONFIG, _write_blob

        return _write_blob(workdir, json.dumps(self.document).encode(), OCI_CONFIG)


def imported(workspace: Workspace, uri: str) -> Path:
    target = workspace.out / "image.sqsh"
    target.unlink(missing_ok=True)
    result = workspace.run("import", "-q", "-o", str(target), uri)
    assert result.returncode == 0, result.stderr
    return target


def test_volumes_through_links_bind_the_images_paths_not_the_hosts(hostile: dict[str, str], host_target: Path,
                                                                   workspace: Workspace) -> None:
    image = str(imported(workspace, hostile["linked-volumes"]))
    script = ("cat /absolute/where /relative/where /deep/up/var/tmp/hydria-hostile-target/where "
              f"{HOST_TARGET}/where; touch /absolute/planted /relative/planted {HOST_TARGET}/planted")
    result = workspace.run("start", image, "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "image\n" * 4
    assert sorted(p.name for p in host_target.iterdir()) == ["where"]
    assert (host_target / "where").read_text() == "host\n"


def test_identity_files_linked_to_the_host_are_written_inside_the_container(
        hostile: dict[str, str], host_target: Path, workspace: Workspace) -> None:
    """Every start writes the caller's passwd and group entries: an image whose /etc/passwd and
    /etc/group link to a host file the user can write gets them in its own file of that path (the
    host's was overwritten before the root's own edits resolved their paths in the root)."""
    image = str(imported(workspace, hostile["linked-identity"]))
    result = workspace.run("start", image, "sh", "-c", f"head -qn 1 {HOST_TARGET}/where {HOST_TARGET}/group; id -un")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"root:x:0:0:root:/root:/bin/sh\nroot:x:0:\n{workspace.user.name}\n"
    assert sorted(p.name for p in host_target.iterdir()) == ["where"]
    assert (host_target / "where").read_text() == "host\n"


def test_volume_names_cannot_add_fstab_lines(hostile: dict[str, str], host_target: Path,
                                             workspace: Workspace) -> None:
    image = str(imported(workspace, hostile["injected-volume"]))
    result = workspace.run("start", image, "sh", "-c", "ls -d /injected /home-injected '/$HOME/${HOME}' 2>&1")
    assert "/injected: No such file" in result.stdout and "/home-injected: No such file" in result.stdout
    assert "/$HOME/${HOME}\n" in result.stdout
    assert sorted(p.name for p in host_target.iterdir()) == ["where"]


def test_config_text_cannot_change_rc_or_environment(hostile: dict[str, str], workspace: Workspace) -> None:
    image = str(imported(workspace, hostile["injected-env"]))
    result = workspace.run("start", image, "sh", "-c", 'pwd; echo "$LINES"; env | grep -c "^INJECTED=" || :')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["/tmp/it's $(false)", "`false`", "a HYDRIA_X=b INJECTED=c D=e", "0"]


@pytest.mark.parametrize(("name", "message"), [
    ("nul-in-env", "Invalid image config: Env holds a NUL byte"),
    ("labels-list", "Invalid image config: Labels must be an object, not list"),
    ("entrypoint-number", "Invalid image config: Entrypoint must be a list of strings, not int"),
    ("config-list", "is not a JSON object"),
    ("config-string", "Invalid image config: config must be an object, not str"),
])
def test_malformed_configs_are_refused(name: str, message: str, hostile: dict[str, str],
                                       wrong_shapes: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "-o", "refused.sqsh", {**hostile, **wrong_shapes}[name])
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not list(workspace.out.iterdir())


@pytest.fixture(scope="module")
def deep_tree(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> str:
    """busybox with a layer of 10,000 nested directories (a few hundred kilobytes): its paths are
    far longer than PATH_MAX and deeper than Python's recursion limit."""
    work = image_workdir / "deep"
    work.mkdir(exist_ok=True)
    tar = work / "deep.tar"
    with LayerTar(tar) as layer:
        name = "d"
        for _ in range(10_000):
            layer.directory(name)
            name += "/d"
        layer.file(name.rsplit("/", 1)[0] + "/leaf", "bottom\n")
    push([Image([busybox.image.layers[0], make_layer(tar, work)], busybox.image.config)], registry.address,
         "hostile/deep", "latest", work)
    return f"docker://{registry.address}#hostile/deep:latest"


def test_a_tree_deeper_than_path_max_imports_starts_and_is_refused_by_unpack(deep_tree: str,
                                                                             workspace: Workspace) -> None:
    image = str(imported(workspace, deep_tree))
    started = workspace.run("start", image, "ls", "/d")
    assert started.returncode == 0 and started.stdout == "d\n", started.stderr
    unpacked = workspace.run("create", "--unpack", "-n", "flat", image)
    assert unpacked.returncode == 1 and "Traceback" not in unpacked.stderr
    assert "cannot unpack" in unpacked.stderr and "paths longer than this system allows" in unpacked.stderr
    assert "hint: create it without --unpack" in unpacked.stderr
    data = workspace.root / "data"
    assert list(data.iterdir()) == []  # the partial tree unsquashfs left is gone
    assert workspace.run("create", "-n", "mounted", image).returncode == 0
    # The container's own writes: deeper than Python's recursion limit (a shell's cd stops at PATH_MAX).
    written = workspace.run("start", "--rw", "mounted", "sh", "-c",
                            "cd / && for i in $(seq 1500); do mkdir e && cd e || exit 1; done")
    assert written.returncode == 0, written.stderr
    assert workspace.run("export", "-o", str(workspace.out / "deep.sqsh"), "mounted").returncode == 0
    removed = workspace.run("remove", "-f", "mounted")
    assert removed.returncode == 0 and "Traceback" not in removed.stderr, removed.stderr
    assert list(data.iterdir()) == []


@pytest.fixture(scope="module")
def odd_names(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> dict[str, str]:
    """busybox with names that a text format of the tree must escape; some with a tab or a line break."""
    work = image_workdir / "odd-names"
    work.mkdir(exist_ok=True)
    uris = {}
    for kind, names in (("escaped", ["a b", "back\\slash", 'quo"te', "bad\udcff", "-dash", "#hash"]),
                        ("tab-or-line-break", ["tab\there", "new\nline"])):
        tar = work / f"{kind}.tar"
        with LayerTar(tar) as layer:
            layer.directory("odd")
            for name in names:
                layer.file(f"odd/{name}", f"{name!r}\n")
        push([Image([busybox.image.layers[0], make_layer(tar, work)], busybox.image.config)], registry.address,
             f"hostile/odd-{kind}", "latest", work)
        uris[kind] = f"docker://{registry.address}#hostile/odd-{kind}:latest"
    return uris


def listing(image: Path) -> list[str]:
    return subprocess.run(["unsquashfs", "-lln", "-d", "", str(image)], capture_output=True, check=True,
                          text=True, errors="surrogateescape").stdout.splitlines()[1:]


@pytest.mark.parametrize("kind", ["escaped", "tab-or-line-break", "deep"])
def test_odd_trees_repacked_by_mksquashfs_arrive_whole_or_not_at_all(kind: str, odd_names: dict[str, str],
                                                                      deep_tree: str, workspace: Workspace) -> None:
    """enroot's default squash options store data uncompressed, which mksquashfs writes from a text
    description of the tree: every name arrives as it is, or the import fails saying why and leaves nothing."""
    uri = deep_tree if kind == "deep" else odd_names[kind]
    plain = workspace.run("import", "-o", "plain.sqsh", uri)
    assert plain.returncode == 0, plain.stderr
    result = workspace.run("import", "-o", "repacked.sqsh", uri, HYDRIA_SQUASH_OPTIONS="-comp lzo -noD")
    assert "Traceback" not in result.stderr
    if kind != "escaped":  # beyond what mksquashfs 4.5's pseudo files can describe
        assert result.returncode == 1 and "cannot repack the image: mksquashfs" in result.stderr, result.stderr
        assert "cannot describe every tree (names with a tab or a line break, paths over 16 KiB)" in result.stderr
        assert sorted(p.name for p in workspace.out.iterdir()) == ["plain.sqsh"]
        return
    assert result.returncode == 0, result.stderr
    assert [line.split(None, 5)[::5] for line in listing(workspace.out / "repacked.sqsh")] == \
           [line.split(None, 5)[::5] for line in listing(workspace.out / "plain.sqsh")]
