"""doctor's Slurm plugin check says what the plugstack's store_trees gives on the node's kernel
(docs/slurm.md, "Kept once per node: the store's images")."""

from __future__ import annotations

import pytest

from hydria import doctor
from hydria.doctor import Check

FOUND = Check("slurm plugin", "ok", "/usr/lib/spank_hydria.so (required) in /etc/slurm/plugstack.conf")
LINE = ["required", "/usr/lib/spank_hydria.so", "store_owner=hydria-store"]


def test_without_store_trees_the_check_is_unchanged() -> None:
    assert doctor._store_trees(LINE, FOUND) == FOUND


@pytest.mark.parametrize(("release", "status"), [("5.15.0-91-generic", "warn"), ("5.19.0", "ok"), ("6.8.0-31", "ok")])
def test_store_trees_need_an_overlay_over_idmapped_mounts(monkeypatch: pytest.MonkeyPatch, release: str,
                                                          status: str) -> None:
    monkeypatch.setattr(doctor.platform, "release", lambda: release)
    check = doctor._store_trees([*LINE, "store_trees=/var/tmp/trees"], FOUND)
    assert check.status == status and check.detail.startswith(FOUND.detail)
    if status == "warn":
        assert "needs Linux 5.19" in check.detail and "each user keeps their own" in check.detail and check.fix
    else:
        assert check.detail.endswith("kept once per node in /var/tmp/trees")
