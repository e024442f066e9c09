"""An image's provenance as its /etc/rc records it (the reference and the manifest digest) and as
``hydria verify`` reads it back: from the rc text, from a squashfs made by tar2sqfs, and the
records that are none (another tool's rc, a crafted digest, a FIFO named as the image)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from hydria.image.ref.runtime_files import runtime_files
from hydria.image.trust.provenance import (
    NoProvenance,
    Provenance,
    parse_rc,
    recorded,
    recorded_in_tree,
)

DIGEST = "sha256:" + "ab" * 32


def test_the_rc_records_the_reference_and_the_digest_first() -> None:
    rc = runtime_files({"Cmd": ["sh"], "Labels": {"x": "y"}}, "docker://r#a/b:1", DIGEST).rc
    assert rc.splitlines()[:3] == ["# hydria-provenance: docker://r#a/b:1", f"# hydria-digest: {DIGEST}", "# x y"]
    assert parse_rc(rc, "i") == Provenance("docker://r#a/b:1", DIGEST)


def test_a_local_source_records_no_digest() -> None:
    rc = runtime_files({}, "oci-archive:///tmp/x.tar").rc
    assert "hydria-digest" not in rc
    assert parse_rc(rc, "i") == Provenance("oci-archive:///tmp/x.tar", None)


def test_enroots_line_gives_the_reference() -> None:
    assert parse_rc("# enroot-provenance: docker://ubuntu:24.04\ncd /\n", "i") == \
        Provenance("docker://ubuntu:24.04", None)


@pytest.mark.parametrize(("rc", "said"), [
    ("", "records no provenance"),
    ("#!/bin/sh\nexec sh\n", "records no provenance"),
    ("# hydria-provenance: docker://a\n# hydria-digest: sha256:12\n", "records a manifest digest that is none"),
    ("# hydria-provenance: docker://a\n# hydria-digest: md5:" + "0" * 32 + "\n", "a manifest digest that is none"),
])
def test_what_records_no_provenance_is_said(rc: str, said: str) -> None:
    with pytest.raises(NoProvenance, match=said):
        parse_rc(rc, "image.sqsh")


def _squashfs(tmp_path: Path, files: dict[str, bytes]) -> Path:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in files.items():
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
    image = tmp_path / "image.sqsh"
    subprocess.run(["tar2sqfs", "-q", "-c", "gzip", str(image)], input=archive.getvalue(), check=True)
    return image


def test_an_image_file_is_read_with_sqfscat(tmp_path: Path) -> None:
    rc = runtime_files({}, "docker://r#a/b:1", DIGEST).rc
    image = _squashfs(tmp_path, {"etc/rc": rc.encode(), "bin/x": b"x"})
    assert recorded(str(image)) == Provenance("docker://r#a/b:1", DIGEST)


def test_an_image_without_an_rc_says_so(tmp_path: Path) -> None:
    image = _squashfs(tmp_path, {"bin/x": b"x"})
    with pytest.raises(NoProvenance, match="holds no /etc/rc that can be read"):
        recorded(str(image))


def test_a_fifo_named_as_the_image_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "image.sqsh"
    os.mkfifo(fifo)
    with pytest.raises(NoProvenance, match="not a regular file"):
        recorded(str(fifo))


def test_an_unpacked_container_is_read_from_its_tree(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "rc").write_text(runtime_files({}, "docker://r#a/b:1", DIGEST).rc)
    assert recorded_in_tree(str(tmp_path), "torch") == Provenance("docker://r#a/b:1", DIGEST)
    (tmp_path / "etc" / "rc").unlink()
    with pytest.raises(NoProvenance, match="cannot read /etc/rc of torch"):
        recorded_in_tree(str(tmp_path), "torch")
