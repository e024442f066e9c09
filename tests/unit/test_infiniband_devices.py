"""The InfiniBand hook's device discovery and selection (hooks/infiniband.py) on a fake node tree
(testbed/fakeib.py): no InfiniBand card exists on the test machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from hydria.errors import HydriaError
from hydria.hooks import infiniband
from testbed import fakeib


def test_devices_are_numbered_as_enroot_numbers_them(tmp_path: Path) -> None:
    devices = infiniband.discover(str(fakeib.build(tmp_path)))
    assert [(d.driver, d.node, d.interface) for d in devices] == [
        ("mlx5", "/dev/infiniband/uverbs0", "mlx5_0"), ("mlx5", "/dev/infiniband/uverbs1", "mlx5_1")]
    assert devices[1].verbs_link == "/sys/devices/pci0000:00/0000:5e:00.0/infiniband_verbs/uverbs1"
    assert devices[0].interface_link == "/sys/devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0"


def test_selection(tmp_path: Path) -> None:
    devices = infiniband.discover(str(fakeib.build(tmp_path)))
    assert infiniband.select(devices, "all") == devices
    assert infiniband.select(devices, "1") == [devices[1]]
    with pytest.raises(HydriaError, match="Unknown MELLANOX device id: 2"):
        infiniband.select(devices, "0,2")
    with pytest.raises(HydriaError, match="Unknown MELLANOX device id: x"):
        infiniband.select(devices, "x")


def test_requested_host_first_then_container() -> None:
    assert infiniband.requested({}, {}) is None
    assert infiniband.requested({"MELLANOX_VISIBLE_DEVICES": "void"}, {"MELLANOX_VISIBLE_DEVICES": "all"}) is None
    assert infiniband.requested({}, {"MELLANOX_VISIBLE_DEVICES": "all"}) == "all"
    assert infiniband.requested({"MELLANOX_VISIBLE_DEVICES": "0"}, {"MELLANOX_VISIBLE_DEVICES": "all"}) == "0"
    assert infiniband.discover("/nonexistent") == []
