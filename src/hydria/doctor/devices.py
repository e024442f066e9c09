"""The devices a container may be given: NVIDIA GPUs, CDI devices, InfiniBand."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from hydria.config import Settings
from hydria.doctor.report import Check


def check_gpus() -> Check:
    from hydria.hooks import ldcache
    from hydria.hooks.nvidia import discover_gpus

    gpus = discover_gpus("/")
    if not gpus:
        return Check("gpus", "skip", "no NVIDIA GPU on this node")
    try:  # where the NVIDIA hook finds the driver's libraries
        cache = Path("/etc/ld.so.cache").read_bytes()
    except OSError:
        cache = b""
    if not any(soname == "libnvidia-ml.so.1" for soname, _ in ldcache.entries(cache)):
        return Check("gpus", "fail", f"{len(gpus)} GPU(s) but no libnvidia-ml.so.1 in the loader cache",
                     "install the NVIDIA driver's user-space libraries, then run ldconfig")
    return Check("gpus", "ok", ", ".join(f"{g.number}: {g.model}" for g in gpus))


def check_cdi(settings: Settings) -> Check:
    """The CDI devices that ``start --device`` can give (docs/devices.md), and specs left out."""
    from hydria.hooks import cdi

    dirs = cdi.spec_dirs(settings.cdi_spec_dirs)
    registry = cdi.load(dirs)
    problems = [*registry.invalid.values(),
                *(f"{name} is defined by {' and '.join(paths)}" for name, paths in registry.conflicts.items())]
    if problems:
        return Check("cdi devices", "fail", f"{len(registry.devices)} device(s); left out: {'; '.join(problems)}",
                     "the device vendor's tool writes the spec anew (e.g. nvidia-ctk cdi generate); "
                     "hydria cdi list shows each problem")
    if not registry.devices:
        return Check("cdi devices", "skip", f"no CDI spec in {', '.join(dirs) or 'HYDRIA_CDI_SPEC_DIRS (empty)'}")
    kinds = sorted(registry.kinds())
    return Check("cdi devices", "ok", f"{len(registry.devices)} device(s) of {', '.join(kinds)}: --device "
                 f"{min(registry.devices)}")


def check_infiniband() -> Check:
    devices = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
    if not devices:
        return Check("infiniband", "skip", "no RDMA device on this node")
    verbs = sorted(glob.glob("/dev/infiniband/uverbs*"))
    if not verbs or not all(os.access(v, os.R_OK | os.W_OK) for v in verbs):
        return Check("infiniband", "fail", f"{', '.join(devices)}: /dev/infiniband/uverbs* missing or not usable",
                     "load ib_uverbs and make the devices readable and writable by users")
    return Check("infiniband", "ok", ", ".join(devices))
