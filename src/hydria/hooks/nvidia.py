"""The built-in NVIDIA hook: the node's GPUs, driver libraries and utilities inside the container,
in Python, with no dependency on libnvidia-container.

Requested as with enroot and the NVIDIA container toolkit: ``NVIDIA_VISIBLE_DEVICES`` (``all``,
``none``, ``void``, GPU indexes in PCI bus order, ``GPU-`` UUIDs) and ``NVIDIA_DRIVER_CAPABILITIES``
(default ``utility``; ``all``). The host's value wins; the container's (usually from the image,
as CUDA images set ``NVIDIA_VISIBLE_DEVICES=all``) fills in what the host leaves unset.

What it does, as edits of the container (runtime/edits.py) that the start applies:

* finds the driver's libraries for the capabilities in the driver root's ``ld.so.cache`` and
  bind-mounts each, read-only, into the container's library directory, with its soname links
  (``libcuda.so.1 -> libcuda.so.580.95.05``), then refreshes the container's loader cache with the
  image's own ``ldconfig``;
* bind-mounts the utilities (``nvidia-smi``, ...) into ``/usr/bin``;
* narrows a subset of GPUs with ``CUDA_VISIBLE_DEVICES`` (UUIDs), because the container shares
  the host's ``/dev``: GPUs that a job must not use are fenced off by Slurm's device cgroup, as
  with enroot.

An image that merely asks for GPUs on a node without an NVIDIA driver starts without them; a GPU
asked for by the user (``NVIDIA_VISIBLE_DEVICES`` in the caller's environment, or ``--env``) is an
error there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.hooks import ldcache
from hydria.log import Logger
from hydria.record import Record
from hydria.runtime.edits import DEVICE_BIND, Edits, Link, StartContext
from hydria.runtime.fstab import READ_ONLY_FILE_BIND, MountEntry
from hydria.runtime.mounts import resolve_in_root

log = Logger(__name__)
ORIGIN = "nvidia hook"

CAPABILITIES = ("compute", "compat32", "display", "graphics", "utility", "video", "ngx")
DEFAULT_CAPABILITIES = ("utility",)
LIBRARIES: Mapping[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so"),
    "compute": ("libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-ptxjitcompiler.so",
                "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so", "libnvidia-compiler.so",
                "libnvidia-nvvm.so", "libnvidia-gpucomp.so"),
    "video": ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"),
    "graphics": ("libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so",
                 "libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-rtcore.so", "libnvoptix.so",
                 "libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
                 "libnvidia-glvkspirv.so", "libnvidia-cbl.so"),
    "ngx": ("libnvidia-ngx.so",),
}
BINARIES: Mapping[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
COMPUTE_NODES = ("gdrdrv", "nvidia-caps-imex-channels")
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/nvidia/bin")


class NvidiaError(HydriaError):
    pass


class Gpu(Record):
    number: int  # as nvidia-smi numbers it (tuple's own index() keeps that name)
    minor: int
    uuid: str
    bus: str
    model: str


class Request(Record):
    devices: str
    capabilities: tuple[str, ...]
    by_user: bool  # the host environment or --env asked, not only the image


@dataclass
class Plan:
    """What the hook will do to one container."""

    mounts: list[MountEntry] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (path in the container, link target)
    environment: dict[str, str] = field(default_factory=dict)


def request_from(host: Mapping[str, str], container: Mapping[str, str],
                 asked: frozenset[str] = frozenset()) -> Request | None:
    """The GPUs and capabilities asked for, or None when the hook has nothing to do; the user
    asked (rather than the image) where the host's environment or ``asked`` (--env's names) has
    ``NVIDIA_VISIBLE_DEVICES``. Raises NvidiaError for an unknown capability."""
    def value(name: str) -> str | None:
        return host.get(name, container.get(name))

    devices = value("NVIDIA_VISIBLE_DEVICES")
    if devices is None or devices.strip() in ("", "void"):
        return None
    wanted = [c.strip() for c in (value("NVIDIA_DRIVER_CAPABILITIES") or "").split(",") if c.strip()]
    if "all" in wanted:
        capabilities: tuple[str, ...] = CAPABILITIES
    else:
        for capability in wanted:
            if capability not in CAPABILITIES:
                raise NvidiaError(f"Unknown NVIDIA driver capability: {capability}",
                                  hint=f"NVIDIA_DRIVER_CAPABILITIES takes all or any of {', '.join(CAPABILITIES)}")
        capabilities = tuple(wanted) or DEFAULT_CAPABILITIES
    return Request(devices.strip(), capabilities, "NVIDIA_VISIBLE_DEVICES" in host or "NVIDIA_VISIBLE_DEVICES" in asked)


def discover_gpus(driver_root: str) -> list[Gpu]:
    """The node's GPUs from ``/proc/driver/nvidia/gpus``, indexed in PCI bus order (as nvidia-smi and
    CUDA's PCI_BUS_ID order number them)."""
    found = []
    for info in Path(driver_root, "proc/driver/nvidia/gpus").glob("*/information"):
        fields = {}
        for line in info.read_text(errors="replace").splitlines():
            key, _, rest = line.partition(":")
            fields[key.strip()] = rest.strip()
        bus = fields.get("Bus Location", info.parent.name).lower()
        found.append((bus, int(fields.get("Device Minor", "-1")), fields.get("GPU UUID", ""), fields.get("Model", "")))
    return [Gpu(index, minor, uuid, bus, model) for index, (bus, minor, uuid, model) in enumerate(sorted(found))]


class MigDevice(Record):
    gpu_uuid: str  # of the GPU it is part of
    number: int  # on that GPU, as nvidia-smi -L numbers them
    uuid: str  # MIG-...


class Selection(Record):
    gpus: list[Gpu]  # whole GPUs, and the GPUs of the MIG devices named
    mig: list[str]  # UUIDs of the MIG devices named, in the order named


def parse_mig_listing(text: str) -> list[MigDevice]:
    """The MIG devices in ``nvidia-smi -L`` output::

        GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b...)
          MIG 1g.5gb      Device  0: (UUID: MIG-c6d4...)
    """
    found = []
    gpu = ""
    for line in text.splitlines():
        words = line.split()
        uuid = line.rpartition("(UUID:")[2].strip().rstrip(")").strip() if "(UUID:" in line else ""
        if words[:1] == ["GPU"]:
            gpu = uuid
        elif words[:1] == ["MIG"] and "Device" in words[:-1] and uuid:
            number = words[words.index("Device") + 1].rstrip(":")
            if is_number(number):
                found.append(MigDevice(gpu, int(number), uuid))
    return found


def select(gpus: list[Gpu], devices: str, slurm_gpus: str | None = None,
           mig_devices: Callable[[], list[MigDevice]] = list) -> Selection:
    """The GPUs and MIG devices named by ``NVIDIA_VISIBLE_DEVICES``: GPU indexes or ``GPU-``
    UUIDs, MIG devices as ``MIG-`` UUIDs or ``GPU:MIG`` index pairs (``mig_devices`` lists them,
    asked only when one is named). ``all`` means the job's GPUs under Slurm
    (``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS``, device minor numbers). Raises NvidiaError."""
    if devices == "none":
        return Selection([], [])
    if devices == "all":
        if slurm_gpus:
            allocated = {int(m) for m in slurm_gpus.split(",") if is_number(m.strip())}
            return Selection([gpu for gpu in gpus if gpu.minor in allocated], [])
        return Selection(list(gpus), [])
    chosen: list[Gpu] = []
    mig: list[str] = []
    migs: list[MigDevice] | None = None
    for token in (t.strip() for t in devices.split(",")):
        if token.startswith("MIG-") or ":" in token:
            migs = mig_devices() if migs is None else migs
            device = _find_mig(gpus, migs, token)
            match = [g for g in gpus if g.uuid == device.gpu_uuid]
            if device.uuid not in mig:
                mig.append(device.uuid)
        else:
            match = [g for g in gpus if (is_number(token) and g.number == int(token)) or (token and g.uuid == token)]
        if not match:
            known = ", ".join(f"{g.number} ({g.uuid})" for g in gpus) or "none"
            raise NvidiaError(f"Unknown NVIDIA device: {token}",
                              hint=f"this node's GPUs are: {known}; NVIDIA_VISIBLE_DEVICES takes indexes, "
                                   "GPU- UUIDs, MIG- UUIDs, GPU:MIG indexes, all, none or void")
        chosen += [g for g in match if g not in chosen]
    return Selection(chosen, mig)


def _find_mig(gpus: list[Gpu], migs: list[MigDevice], token: str) -> MigDevice:
    gpu_index, _, mig_index = token.partition(":")
    by_index = {g.number: g.uuid for g in gpus}
    for device in migs:
        if device.uuid == token or (is_number(gpu_index) and is_number(mig_index) and device.number == int(mig_index)
                                    and by_index.get(int(gpu_index)) == device.gpu_uuid):
            return device
    index_of = {g.uuid: g.number for g in gpus}
    known = ", ".join(f"{index_of.get(d.gpu_uuid, '?')}:{d.number} ({d.uuid})" for d in migs) or "none"
    raise NvidiaError(f"Unknown NVIDIA device: {token}", hint=f"this node's MIG devices are: {known}")


def _mig_devices(smi: str | None) -> list[MigDevice]:
    """The node's MIG devices, from the host's nvidia-smi (only NVML knows their UUIDs)."""
    if smi is None:
        raise NvidiaError("MIG devices were named in NVIDIA_VISIBLE_DEVICES, but this node has no nvidia-smi "
                          "to list them", hint="name whole GPUs, or install the driver's utilities on the node")
    try:
        result = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NvidiaError(f"nvidia-smi -L failed: {e}") from None
    if result.returncode != 0:
        raise NvidiaError(f"nvidia-smi -L failed: {(result.stderr or result.stdout).strip()}")
    return parse_mig_listing(result.stdout)


def plan(request: Request, driver_root: str, root: str, host: Mapping[str, str],
         private_dev: bool = False) -> Plan | None:
    """What to mount and link for ``request``, or None on a node without an NVIDIA driver.
    Raises NvidiaError when the caller asked for GPUs that this node cannot give."""
    if not os.path.isdir(os.path.join(driver_root, "proc/driver/nvidia")):
        if request.by_user:
            raise NvidiaError("NVIDIA_VISIBLE_DEVICES is set but this node has no NVIDIA driver loaded",
                              hint="run on a GPU node, or unset NVIDIA_VISIBLE_DEVICES (or set it to void)")
        log.debug("the image asks for NVIDIA GPUs; this node has no NVIDIA driver")
        return None
    all_gpus, selection = _selection(request, driver_root, host)
    if request.devices == "all" and not selection.gpus and request.by_user:
        log.warning("NVIDIA_VISIBLE_DEVICES=all: %s, so the container gets none (CUDA programs will find no device)",
                    "this node has no NVIDIA GPU" if not all_gpus else "the job was given no GPU of this node "
                    "(ask Slurm for some: --gpus=N or --gres=gpu:N)")
    result = Plan()
    if not Path(driver_root, "dev/nvidia-uvm").exists() and "compute" in request.capabilities:
        log.warning("the nvidia_uvm kernel module is not loaded: CUDA programs will fail to start")
    result.environment.update(_cuda_visible_devices(selection, all_gpus))
    _plan_libraries(result, request, driver_root, root)
    if private_dev:
        _plan_devices(result, request, selection.gpus, driver_root)
    for capability in request.capabilities:
        for name in BINARIES.get(capability, ()):
            source = _find_binary(driver_root, name, host)
            if source:
                result.mounts.append(MountEntry(source, f"/usr/bin/{name}", "none", READ_ONLY_FILE_BIND, origin=ORIGIN))
    return result


def _plan_devices(result: Plan, request: Request, gpus: list[Gpu], driver_root: str) -> None:
    """The driver's device nodes for a private /dev (``HYDRIA_RESTRICT_DEV``, ``--ipc``; the
    host's /dev has them all): the control nodes, the chosen GPUs' and, with compute, GPUDirect
    RDMA's and the IMEX channels, those the node has."""
    names = [*CONTROL_NODES, *(f"nvidia{gpu.minor}" for gpu in gpus)]
    if "compute" in request.capabilities:
        names += COMPUTE_NODES
    for name in names:
        source = os.path.join(driver_root, "dev", name)
        if os.path.exists(source):
            create = "x-create=dir" if os.path.isdir(source) else "x-create=file"
            result.mounts.append(MountEntry(source, f"/dev/{name}", "none", (create, *DEVICE_BIND),
                                            origin=ORIGIN))


def _plan_libraries(result: Plan, request: Request, driver_root: str, root: str) -> None:
    try:
        cache = Path(driver_root, "etc/ld.so.cache").read_bytes()
    except OSError:
        raise NvidiaError(f"cannot read the loader cache {Path(driver_root, 'etc/ld.so.cache')}",
                          hint="run ldconfig on this node so that the NVIDIA driver's libraries can be found") from None
    prefixes = tuple(p for c in request.capabilities for p in LIBRARIES.get(c, ()))
    library_dir = _library_dir(root)
    mounted: set[str] = set()  # real file names
    linked: set[str] = set()  # sonames
    for soname, path in ldcache.entries(cache):
        if not any(soname == p or soname.startswith(p + ".") for p in prefixes):
            continue
        real = resolve_in_root(driver_root, path)
        if not os.path.isfile(real):
            continue
        name = os.path.basename(real)
        if name not in mounted:
            mounted.add(name)
            result.mounts.append(MountEntry(real, f"{library_dir}/{name}", "none", READ_ONLY_FILE_BIND, origin=ORIGIN))
        if soname != name and soname not in linked:
            linked.add(soname)
            result.links.append((f"{library_dir}/{soname}", name))


def _library_dir(root: str) -> str:
    """Where the image's loader looks by default: the multiarch directory on Debian and Ubuntu,
    lib64 on Red Hat-style images."""
    for candidate in (f"/usr/lib/{os.uname().machine}-linux-gnu", "/usr/lib64", "/lib64"):
        if os.path.isdir(resolve_in_root(root, candidate)):
            return candidate
    return "/usr/lib"


def _find_binary(driver_root: str, name: str, host: Mapping[str, str]) -> str | None:
    dirs = [os.path.join(driver_root, d) for d in BINARY_DIRS]
    if driver_root == "/":
        dirs = [d for d in host.get("PATH", "").split(":") if d.startswith("/")] + dirs
    for directory in dirs:
        candidate = os.path.realpath(os.path.join(directory, name))
        if os.access(candidate, os.X_OK) and _is_elf(candidate):
            return candidate
    return None


def _is_elf(path: str) -> bool:
    """Only the driver's own programs: a site's wrapper script around them (``exec
    /usr/local/nvidia/bin/nvidia-smi``) would point at a path the container does not have."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


CDI_KIND = "nvidia.com/gpu"  # the kind of the spec `nvidia-ctk cdi generate` writes


def cdi_devices(request: Request, host: Mapping[str, str], driver_root: str) -> tuple[list[str], dict[str, str]]:
    """``NVIDIA_VISIBLE_DEVICES`` as the CDI devices of NVIDIA's spec (``HYDRIA_NVIDIA_CDI``), which
    names GPUs by index and UUID and MIG devices by ``GPU:MIG`` and UUID, as the variable does
    (``all`` under Slurm: the job's GPUs, by index), and the ``CUDA_VISIBLE_DEVICES`` that the
    built-in hook sets for the same request (a container sharing the node's /dev sees every GPU)."""
    if request.devices == "none":
        return [], {}
    all_gpus, selection = _selection(request, driver_root, host)
    environment = _cuda_visible_devices(selection, all_gpus)
    if request.devices == "all":
        names = [str(gpu.number) for gpu in selection.gpus] if environment else ["all"]
    else:
        names = [token.strip() for token in request.devices.split(",") if token.strip()]
    return [f"{CDI_KIND}={name}" for name in names], environment


def _selection(request: Request, driver_root: str, host: Mapping[str, str]) -> tuple[list[Gpu], Selection]:
    """The node's GPUs, and those the request names (the job's under Slurm). Raises NvidiaError."""
    all_gpus = discover_gpus(driver_root)
    return all_gpus, select(all_gpus, request.devices, host.get("SLURM_STEP_GPUS") or host.get("SLURM_JOB_GPUS"),
                            lambda: _mig_devices(_find_binary(driver_root, "nvidia-smi", host)))


def _cuda_visible_devices(selection: Selection, all_gpus: list[Gpu]) -> dict[str, str]:
    """What CUDA is told where the container sees more GPUs than were asked for: UUIDs, which
    (unlike indexes) mean the same to CUDA as to nvidia-smi."""
    if selection.mig:
        return {"CUDA_VISIBLE_DEVICES": ",".join(selection.mig)}
    if selection.gpus != all_gpus:
        return {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in selection.gpus)}
    return {}


def edits(context: StartContext) -> Edits:
    """The hook's edits of the container (none when nothing is asked, or the node has no driver
    for an image's own request). Raises NvidiaError."""
    settings = context.settings
    request = request_from(context.host, context.container, context.asked)
    result = plan(request, str(settings.nvidia_driver_root), context.root, context.host,
                  private_dev=settings.restrict_dev or settings.unshare_ipc) if request else None
    if result is None:
        return Edits()
    links = tuple(Link(path, target, ORIGIN) for path, target in result.links)
    return Edits(tuple(result.environment.items()), tuple(result.mounts), links=links,
                 libraries=("the NVIDIA libraries",) if links else ())
