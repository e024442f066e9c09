"""A build step's layer blob (imagebuild/layers.py): compressed in threads, yet the same bytes
whatever their number, and a gzip of exactly the tar its diff ID names."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from hydria.imagebuild.layers import compressors, write_layer


def _upper(root: Path) -> Path:
    """A step's changes: a few MiB of files that compress unevenly, over several blocks."""
    upper = root / "upper"
    for number in range(40):
        folder = upper / f"d{number % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{number}").write_bytes(os.urandom(50_000) + bytes(number * 20_000))
    (upper / "link").symlink_to("d0/f0")
    return upper


def test_one_step_makes_one_blob_whatever_the_threads(tmp_path: Path) -> None:
    upper = _upper(tmp_path)
    blobs = []
    for processors in (1, 2, 8):
        blob = io.BytesIO()
        layer = write_layer(str(upper), blob, processors=processors)
        blobs.append((layer, blob.getvalue()))
    assert len({data for _, data in blobs}) == 1
    layer, data = blobs[0]
    assert layer.digest == f"sha256:{hashlib.sha256(data).hexdigest()}" and layer.size == len(data)
    plain = gzip.decompress(data)
    assert layer.diff_id == f"sha256:{hashlib.sha256(plain).hexdigest()}"
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        members = {member.name: member for member in tar.getmembers()}
        assert members["link"].linkname == "d0/f0"
        extracted = tar.extractfile(members["d3/f10"])
        assert extracted is not None and extracted.read() == (upper / "d3" / "f10").read_bytes()


def test_the_tar_writer_keeps_a_processor() -> None:
    assert [compressors(n) for n in (1, 2, 3, 4, 16)] == [1, 1, 2, 3, 3]
    assert compressors(0) == max(1, min(len(os.sched_getaffinity(0)) - 1, 3))
