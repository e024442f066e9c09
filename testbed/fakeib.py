"""A fake node tree with two Mellanox InfiniBand devices, for the InfiniBand hook's tests: no
InfiniBand card exists on the test machines, so the hook reads this tree (``HYDRIA_RDMA_ROOT``)
instead of the node's /sys and /dev. Device nodes are plain files whose contents name them."""

from __future__ import annotations

import os
from pathlib import Path

PCI = ("0000:3b:00.0", "0000:5e:00.0")


def build(root: Path) -> Path:
    """Write the tree under ``root``: sysfs entries as mlx5_core lays them out, /dev/infiniband."""
    for index, address in enumerate(PCI):
        device = root / "sys/devices/pci0000:00" / address
        verbs = device / "infiniband_verbs" / f"uverbs{index}"
        verbs.mkdir(parents=True)
        (verbs / "uevent").write_text(f"MAJOR=231\nMINOR={192 + index}\nDEVNAME=infiniband/uverbs{index}\n")
        interface = device / "infiniband" / f"mlx5_{index}"
        interface.mkdir(parents=True)
        (interface / "uevent").write_text(f"NAME=mlx5_{index}\n")
        driver = root / "sys/bus/pci/drivers/mlx5_core"
        driver.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(device, driver), driver / address)
    for name in ("infiniband_verbs", "infiniband_cm", "infiniband_mad"):
        (root / "sys/class" / name).mkdir(parents=True)
        (root / "sys/class" / name / "abi_version").write_text("6\n")
    (root / "dev/infiniband").mkdir(parents=True)
    for name in ("uverbs0", "uverbs1", "rdma_cm"):
        (root / "dev/infiniband" / name).write_text(f"fake {name}\n")
    return root
