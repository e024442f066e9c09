"""The built-in localtime hook (hooks/localtime.py), on plain directories."""

from __future__ import annotations

import os
from pathlib import Path

from hydria.hooks.localtime import copy_localtime


def make_host(tmp_path: Path, link: str) -> Path:
    zone = tmp_path / "host" / "usr/share/zoneinfo/Europe/Paris"
    zone.parent.mkdir(parents=True)
    zone.write_bytes(b"TZif-paris")
    etc = tmp_path / "host" / "etc"
    etc.mkdir()
    (etc / "localtime").symlink_to(link)
    return etc / "localtime"


def test_the_link_and_its_zone_are_copied(tmp_path: Path) -> None:
    host = make_host(tmp_path, "../usr/share/zoneinfo/Europe/Paris")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/localtime").write_text("the image's own\n")
    copy_localtime(str(root), str(host))
    assert os.readlink(root / "etc/localtime") == "../usr/share/zoneinfo/Europe/Paris"
    assert (root / "etc/localtime").read_bytes() == b"TZif-paris"  # resolves inside the root


def test_nothing_happens_without_a_host_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/localtime").write_text("the image's own\n")
    plain = tmp_path / "localtime"
    plain.write_text("a regular file\n")
    for host in (plain, tmp_path / "missing"):
        copy_localtime(str(root), str(host))
        assert (root / "etc/localtime").read_text() == "the image's own\n"
