"""``podman://IMAGE`` for real: the test image is loaded into a podman storage of the test's own
(``CONTAINERS_STORAGE_CONF``, vfs driver), then imported through ``podman save``, as root (podman
without subordinate ids needs root; the import itself needs no privilege). ``dockerd://`` needs a
Docker daemon, which cannot run here; its parsing is tested with the docker-archive fixture."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed.publish import PublishedImage

pytestmark = pytest.mark.integration


def listing(image: Path) -> list[tuple[str, ...]]:
    """(permissions, owner, size, path) of every entry but the rc, whose provenance line names the source."""
    out = subprocess.run(["unsquashfs", "-lls", "-d", "", str(image)], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines() if line[:1] in "-dlcbps" and len(line.split()) >= 6]
    return sorted((r[0], r[1], r[2], r[5]) for r in rows if not r[5].endswith("/etc/rc"))


def test_podman_image(busybox: PublishedImage, hydria_bin: str, tmp_path: Path) -> None:
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{tmp_path}/graph"\nrunroot = "{tmp_path}/run"\n')
    env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf), "HYDRIA_CACHE_PATH": str(tmp_path / "cache")}
    loaded = subprocess.run(["podman", "load", "-q", "-i", str(busybox.docker_archive)], env=env,
                            capture_output=True, text=True, check=True).stdout
    assert f"localhost/{busybox.repository}:{busybox.tag}" in loaded
    result = subprocess.run([hydria_bin, "import", "-o", "from-podman.sqsh",
                             f"podman://localhost/{busybox.repository}:{busybox.tag}"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    subprocess.run([hydria_bin, "import", "-o", "from-archive.sqsh", f"docker-archive://{busybox.docker_archive}"],
                   env=env, cwd=tmp_path, capture_output=True, check=True)
    tree = listing(tmp_path / "from-podman.sqsh")
    assert len(tree) > 10 and any(row[3].endswith("/bin/busybox") for row in tree)
    assert tree == listing(tmp_path / "from-archive.sqsh")
    rc = subprocess.run(["unsquashfs", "-cat", str(tmp_path / "from-podman.sqsh"), "etc/rc"], capture_output=True,
                        text=True, check=True).stdout
    assert f"podman://localhost/{busybox.repository}:{busybox.tag}" in rc.splitlines()[0]  # provenance

    missing = subprocess.run([hydria_bin, "import", "-o", "missing.sqsh", "podman://localhost/no/such:image"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert missing.returncode == 1 and "[ERROR] podman pull localhost/no/such:image failed" in missing.stderr
    assert not (tmp_path / "missing.sqsh").exists()
