"""One suite over both homes of kept images (hydria/image/kept/interface.py), the user's cache and the image
store, as containerd's snapshotter suite runs over every snapshotter: what an import, a listing
and a prune ask of a home behaves alike in both. Real layer images, made by tar2sqfs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hydria.anonfile import AnonymousFile
from hydria.image.kept.interface import KeptImages, kept_image_files
from hydria.image.kept.store import GRACE, ImageStore
from hydria.image.kept.user_cache import ImageCache
from hydria.image.ref.manifest import Platform
from hydria.image.squash.squashfs import squash_tar
from hydria.runtime.layered import layered_text
from testbed.tarbuild import LayerTar

pytestmark = pytest.mark.integration

OPTIONS = "-comp zstd"


class Home:
    """A home under test, and how a layered image is kept in it (each home has its own way)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        if kind == "cache":
            self.home: KeptImages = ImageCache(root, keep=10)
            self.folder = root / f"images.{os.geteuid()}"
        else:
            (root / "images").mkdir(mode=0o755)
            (root / "meta").mkdir(mode=0o700)
            (root / "locks").mkdir(mode=0o755)
            self.home = ImageStore(root)
            self.folder = root / "images"

    def keep_layered(self, name: str, layers: list[str]) -> Path:
        path = self.folder / f"{name}.layers"
        path.write_bytes(layered_text(layers))
        return path

    def keep_imported(self, uri: str, digest: str, layers: list[str]) -> Path:
        """A layered image kept as an import keeps it, with what it is."""
        if isinstance(self.home, ImageCache):
            return self.home.entry(uri, digest, OPTIONS, Platform("amd64"), layered=True).keep_layered(layers)
        assert isinstance(self.home, ImageStore)
        def write(image: AnonymousFile) -> None:
            os.write(image.fd, layered_text(layers))
        key = ImageStore.key(uri, digest, OPTIONS, Platform("amd64"), layered=True)
        return self.home.publish(key, uri, digest, write, layered=True)

    def age(self) -> None:
        """Every file as if last used two grace periods ago: what a prune may take."""
        past = time.time() - 2 * GRACE
        for path in self.folder.iterdir():
            os.utime(path, (past, min(past, os.stat(path).st_mtime)))


@pytest.fixture(params=["cache", "store"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Home]:
    yield Home(request.param, tmp_path)


def squashed(tmp_path: Path, content: str) -> Callable[[AnonymousFile], None]:
    """A writer of a real layer image holding ``/file`` with ``content``."""
    tar = tmp_path / f"{abs(hash(content))}.tar"
    with LayerTar(tar) as layer:
        layer.file("file", content)
    data = tar.read_bytes()

    def write(image: AnonymousFile) -> None:
        squash_tar(image.path, [], (image.fd,), lambda out: out.write(data))
    return write


def test_a_layer_is_kept_once_and_found_by_its_blob(home: Home, tmp_path: Path) -> None:
    assert home.home.layer("sha256:" + "a" * 64, OPTIONS) is None
    name = home.home.add_layer("sha256:" + "a" * 64, OPTIONS, squashed(tmp_path, "one"))
    assert home.home.layer("sha256:" + "a" * 64, OPTIONS) == name
    assert home.home.layer_file(name).is_file() and home.home.layer_file(name).parent == home.folder
    again = home.home.add_layer("sha256:" + "a" * 64, OPTIONS, squashed(tmp_path, "one"))
    assert again == name and [p.name for p in home.folder.glob("layer-*")] == [name]
    assert home.home.layer("sha256:" + "a" * 64, "-comp xz") is None  # other options: another layer image


def test_a_damaged_layer_image_is_never_served(home: Home, tmp_path: Path) -> None:
    name = home.home.add_layer("sha256:" + "b" * 64, OPTIONS, squashed(tmp_path, "two"))
    path = home.home.layer_file(name)
    os.truncate(path, 200)  # a copy cut short, short of what its superblock says it holds
    assert home.home.layer("sha256:" + "b" * 64, OPTIONS) is None


def test_the_kept_images_are_image_files_and_layered_images(home: Home, tmp_path: Path) -> None:
    name = home.home.add_layer("sha256:" + "c" * 64, OPTIONS, squashed(tmp_path, "three"))
    layered = home.keep_layered("k1", [name])
    (home.folder / "whole.sqsh").write_bytes(b"")
    (home.folder / ".k2.layers.partial").write_bytes(b"")  # an import under way
    assert sorted(home.home.kept_images()) == sorted([layered, home.folder / "whole.sqsh"])
    assert sorted(kept_image_files(home.folder)) == sorted(home.home.kept_images())


def test_a_layered_image_is_in_use_when_all_its_layers_are_mounted(home: Home, tmp_path: Path) -> None:
    low, high = (home.home.add_layer(f"sha256:{letter * 64}", OPTIONS, squashed(tmp_path, letter))
                 for letter in ("d", "e"))
    both = home.keep_layered("both", [low, high])
    only_low = home.keep_layered("low", [low])
    mounted = {os.path.realpath(home.home.layer_file(low))}
    assert home.home.layered_in_use(mounted) == {os.path.realpath(only_low)}
    mounted.add(os.path.realpath(home.home.layer_file(high)))
    assert home.home.layered_in_use(mounted) == {os.path.realpath(only_low), os.path.realpath(both)}


def test_collecting_removes_the_layers_no_kept_image_names(home: Home, tmp_path: Path) -> None:
    kept, loose = (home.home.add_layer(f"sha256:{letter * 64}", OPTIONS, squashed(tmp_path, letter))
                   for letter in ("f", "g"))
    home.keep_layered("image", [kept])
    home.age()
    if home.kind == "cache":
        (home.folder / ".layers.lock").touch()  # made by the cache's first layered import
    home.home.collect_layers()
    assert home.home.layer_file(kept).exists() and not home.home.layer_file(loose).exists()


def test_the_listing_says_what_each_kept_image_is(home: Home, tmp_path: Path) -> None:
    low, high = (home.home.add_layer(f"sha256:{letter * 64}", OPTIONS, squashed(tmp_path, letter))
                 for letter in ("h", "i"))
    older = home.keep_imported("docker://registry.example.com#lab/a:1", "sha256:" + "1" * 64, [low])
    newer = home.keep_imported("docker://registry.example.com#lab/b:2", "sha256:" + "2" * 64, [low, high])
    past = time.time() - 3600
    os.utime(older, (past, past))
    listed = home.home.listing()
    assert [(image.path, image.uri, image.digest) for image in listed] == [
        (newer, "docker://registry.example.com#lab/b:2", "sha256:" + "2" * 64),  # the most recently used first
        (older, "docker://registry.example.com#lab/a:1", "sha256:" + "1" * 64)]
    sizes = {name: home.home.layer_file(name).stat().st_size for name in (low, high)}
    assert [image.size for image in listed] == [newer.stat().st_size + sizes[low] + sizes[high],
                                                older.stat().st_size + sizes[low]]
    assert all(newer.name.startswith(image.key) or older.name.startswith(image.key) for image in listed)
