"""A FAKE NVIDIA driver tree, for testing the GPU hook on machines without a GPU.

No NVIDIA driver or GPU can exist on the test machines, so this builds the files the hook reads
in a directory that ``HYDRIA_NVIDIA_DRIVER_ROOT`` points at: ``proc/driver/nvidia/gpus/*/information``,
``dev/nvidia*`` (plain files), driver libraries compiled with gcc under their real sonames (each
exports ``hydria_fake_driver_version()``), ``etc/ld.so.cache`` written by the real ``ldconfig -r``,
an ``nvidia-smi`` program that prints a line (and, for ``-L``, the GPUs with two MIG devices on
the first), and a wrapper script in
``usr/bin`` that the hook must not take for the real one (as on some GPU nodes). Needs root (``ldconfig -r`` chroots) and gcc.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

VERSION = "580.65.06"
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-encode.so.1")


@dataclass(frozen=True)
class FakeGpu:
    bus: str
    minor: int
    uuid: str


GPUS = (FakeGpu("0000:b1:00.0", 1, "GPU-11111111-2222-3333-4444-555555555555"),
        FakeGpu("0000:3b:00.0", 0, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"))
# MIG devices of the first GPU in PCI order (index 0), as nvidia-smi -L names them
MIG_DEVICES = ("MIG-00000000-1111-2222-3333-444444444444", "MIG-55555555-6666-7777-8888-999999999999")


def build(root: Path, gpus: tuple[FakeGpu, ...] = GPUS) -> Path:
    """Write the fake driver tree under ``root`` (world-readable) and return it."""
    for gpu in gpus:
        info = root / "proc/driver/nvidia/gpus" / gpu.bus / "information"
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(f"Model: \t\t FAKE GPU (hydria test)\nGPU UUID: \t {gpu.uuid}\n"
                        f"Bus Location: \t {gpu.bus}\nDevice Minor: \t {gpu.minor}\n")
        _touch(root / f"dev/nvidia{gpu.minor}")
    for node in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        _touch(root / "dev" / node)
    (root / "proc/driver/nvidia/version").write_text(f"NVRM version: FAKE  {VERSION}\n")
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True, exist_ok=True)
    source = root / "fake.c"
    source.write_text(f"int hydria_fake_driver_version(void) {{ return {VERSION.split('.')[0]}; }}\n")
    for soname in LIBRARIES:
        real = libdir / (soname.rsplit(".so", 1)[0] + f".so.{VERSION}")
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(real), str(source)], check=True)
    source.unlink()
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    smi = root / "usr/local/nvidia/bin/nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi_source = root / "smi.c"
    smi_source.write_text(_smi_source(gpus))
    subprocess.run(["gcc", "-o", str(smi), str(smi_source)], check=True)
    smi_source.unlink()
    wrapper = root / "usr/bin/nvidia-smi"  # a site's wrapper script, which the hook must skip
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text("#!/bin/sh\nexec /opt/elsewhere/nvidia-smi \"$@\"\n")
    wrapper.chmod(0o755)
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    return root


def _smi_source(gpus: tuple[FakeGpu, ...]) -> str:
    listing = ""
    for index, gpu in enumerate(sorted(gpus, key=lambda g: g.bus)):
        listing += f"GPU {index}: FAKE GPU (UUID: {gpu.uuid})\\n"
        if index == 0:
            listing += "".join(f"  MIG 1g.5gb      Device  {n}: (UUID: {uuid})\\n" for n, uuid in enumerate(MIG_DEVICES))
    return ("#include <stdio.h>\n#include <string.h>\n"
            "int main(int argc, char **argv) {\n"
            f'    if (argc > 1 && strcmp(argv[1], "-L") == 0) {{ fputs("{listing}", stdout); return 0; }}\n'
            f'    puts("FAKE nvidia-smi, driver {VERSION}");\n'
            "    return 0;\n}\n")


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
