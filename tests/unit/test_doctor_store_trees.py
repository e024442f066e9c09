"""doctor's Slurm plugin check says what the plugstack's store_trees gives on the node's kernel
(docs/slurm.md, "Kept once per node: the store's images")."""

from __future__ import annotations

import pytest

from hydria.doctor import Check, cluster
from hydria.doctor.cluster import check_store_trees

FOUND = Check("slurm plugin", "ok", "/usr/lib/spank_hydria.so (required) in /etc/slurm/plugstack.conf")
LINE = ["required", "/usr/lib/spank_hydria.so", "store_owner=hydria-store"]


def test_without_store_trees_the_check_is_unchanged() -> None:
    assert check_store_trees(LINE, FOUND) == FOUND


@pytest.mark.parametrize(("release", "status"), [("5.15.0-91-generic", "warn"), ("5.19.0", "ok"), ("6.8.0-31", "ok")])
def test_store_trees_need_an_overlay_over_idmapped_mounts(monkeypatch: pytest.MonkeyPatch, release: str,
                                                          status: str) -> None:
    monkeypatch.setattr(cluster.platform, "release", lambda: release)
    check = check_store_trees([*LINE, "store_trees=/var/tmp/trees"], FOUND)
    assert check.status == status and check.detail.startswith(FOUND.detail)
    if status == "warn":
        assert "needs Linux 5.19" in check.detail and "each user keeps their own" in check.detail and check.fix
    else:
        assert check.detail.endswith("kept once per node in /var/tmp/trees")
