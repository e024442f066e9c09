"""The built-in InfiniBand hook (enroot's ``99-mellanox.sh``): the node's Mellanox RDMA devices
inside the container.

Requested with ``MELLANOX_VISIBLE_DEVICES`` (``all`` or device indexes; ``none``/``void`` or unset:
nothing). The host's value wins; the container's fills in what the host leaves unset. The devices
are the verbs devices of the mlx4/mlx5 drivers, in the order of
``/sys/bus/pci/drivers/mlx?_core/*/infiniband_verbs/*``, as enroot numbers them.

As edits of the container (runtime/edits.py): ``/sys/class/infiniband``, ``infiniband_verbs``,
``infiniband_cm`` and ``infiniband_mad`` are hidden behind empty tmpfs mounts, their
``abi_version`` files and ``/dev/infiniband/rdma_cm`` are bound back, and for each selected device
its ``/dev/infiniband/uverbsN`` is bound and its sysfs entries are linked back. With
``MELLANOX_MOUNT_DRIVER`` the node's provider libraries come too (:mod:`hydria.hooks.ibdriver`).
What enroot does only for real root (umad/issm) is not done.

``HYDRIA_RDMA_ROOT`` is where the node's /sys and /dev are (/ but in tests, which use a fake
tree: no InfiniBand card exists there).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.hooks import ibdriver
from hydria.record import Record
from hydria.runtime.edits import Edits, Link, StartContext, combined
from hydria.runtime.fstab import MountEntry

CLASSES = ("infiniband", "infiniband_verbs", "infiniband_cm", "infiniband_mad")
HIDE = ("nosuid", "noexec", "nodev", "mode=755", "private")
BIND = ("x-create=file", "bind", "ro", "nosuid", "noexec", "private")
ORIGIN = "infiniband"


class Device(Record):
    driver: str  # mlx4, mlx5
    node: str  # /dev/infiniband/uverbs0
    interface: str  # mlx5_0
    verbs_link: str  # /sys/devices/.../infiniband_verbs/uverbs0 (as seen from /)
    interface_link: str  # /sys/devices/.../infiniband/mlx5_0


def requested(host: Mapping[str, str], container: Mapping[str, str]) -> str | None:
    value = host.get("MELLANOX_VISIBLE_DEVICES") or container.get("MELLANOX_VISIBLE_DEVICES")
    return None if value in (None, "", "void", "none") else value


def discover(device_root: str = "/") -> list[Device]:
    """The node's verbs devices, numbered as enroot numbers them."""
    base = os.path.join(device_root, "sys/bus/pci/drivers")
    verbs = sorted(glob.glob(f"{base}/mlx?_core/*/infiniband_verbs/*/uevent"))
    interfaces = sorted(glob.glob(f"{base}/mlx?_core/*/infiniband/*/uevent"))
    found = []
    for index, uevent in enumerate(verbs):
        driver = "mlx4" if "/mlx4_core/" in uevent else "mlx5"
        name = _uevent(uevent).get("DEVNAME", "")
        interface = _uevent(interfaces[index]).get("NAME", "") if index < len(interfaces) else ""
        found.append(Device(driver, f"/dev/{name}", interface,
                            _inside(os.path.realpath(os.path.dirname(uevent)), device_root),
                            _inside(os.path.realpath(os.path.dirname(interfaces[index])), device_root)
                            if index < len(interfaces) else ""))
    return found


def select(devices: list[Device], wanted: str) -> list[Device]:
    """Raises HydriaError for an index the node does not have."""
    if wanted == "all":
        return devices
    chosen = []
    for item in wanted.split(","):
        item = item.strip()
        if not is_number(item) or int(item) >= len(devices):
            raise HydriaError(f"Unknown MELLANOX device id: {item}",
                              hint=f"this node has {len(devices)} InfiniBand device(s), numbered from 0")
        chosen.append(devices[int(item)])
    return chosen


def edits(context: StartContext) -> Edits:
    """The hook's edits of the container: the devices asked for, and with ``MELLANOX_MOUNT_DRIVER``
    the providers' libraries. ``HYDRIA_RDMA_ROOT`` is where the node's /sys and /dev are."""
    host, container = context.host, context.container
    wanted = requested(host, container)
    if wanted is None:
        return Edits()
    device_root = str(context.settings.rdma_root)
    devices = discover(device_root)
    if not devices and wanted == "all":
        return Edits()  # a node without InfiniBand: "all" of nothing
    chosen = select(devices, wanted)

    def source(path: str) -> str:
        return os.path.join(device_root, path.lstrip("/"))

    hidden = [MountEntry("tmpfs", f"/sys/class/{name}", "tmpfs", (*HIDE, "nofail", "silent"), origin=ORIGIN)
              for name in CLASSES]  # a class the kernel does not have stays absent
    shown = [MountEntry(source(f"/sys/class/{name}/abi_version"), f"/sys/class/{name}/abi_version", "none",
                        (*BIND, "nofail", "silent"), origin=ORIGIN) for name in CLASSES[1:]]
    shown.append(MountEntry(source("/dev/infiniband/rdma_cm"), "/dev/infiniband/rdma_cm", "none",
                            (*BIND, "nofail", "silent"), origin=ORIGIN))
    shown += [MountEntry(source(device.node), device.node, "none", BIND, origin=ORIGIN) for device in chosen]
    links = [Link(f"/sys/class/{directory}/{name}", target, ORIGIN, optional=True)
             for device in chosen
             for directory, name, target in (("infiniband", device.interface, device.interface_link),
                                             ("infiniband_verbs", os.path.basename(device.node), device.verbs_link))
             if name and target]
    devices_edits = Edits(mounts=(*hidden, *shown), links=tuple(links))
    if chosen and ibdriver.wanted(host, container):
        return combined([devices_edits, ibdriver.edits({device.driver for device in chosen}, context)])
    return devices_edits


def _uevent(path: str) -> dict[str, str]:
    try:
        with open(path) as handle:
            return dict(line.strip().split("=", 1) for line in handle if "=" in line)
    except OSError:
        return {}


def _inside(path: str, device_root: str) -> str:
    """A host path as the container sees it (the node's /sys is the container's /sys)."""
    root = os.path.realpath(device_root)
    return "/" + os.path.relpath(path, root) if root != "/" else path
