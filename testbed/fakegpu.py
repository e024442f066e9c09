"""A FAKE NVIDIA driver tree, for testing the GPU hook on machines without a GPU.

No NVIDIA driver or GPU can exist on the test machines, so this builds the files the hook reads
in a directory that ``HYDRIA_NVIDIA_DRIVER_ROOT`` points at: ``proc/driver/nvidia/gpus/*/information``,
``dev/nvidia*`` (plain files), driver libraries compiled with gcc under their real sonames (each
exports ``hydria_fake_driver_version()``), ``etc/ld.so.cache`` written by the real ``ldconfig -r``,
an ``nvidia-smi`` program that prints a line, and a wrapper script in
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
    smi_source.write_text(f'#include <stdio.h>\nint main(void) {{ puts("FAKE nvidia-smi, driver {VERSION}"); return 0; }}\n')
    subprocess.run(["gcc", "-o", str(smi), str(smi_source)], check=True)
    smi_source.unlink()
    wrapper = root / "usr/bin/nvidia-smi"  # a site's wrapper script, which the hook must skip
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text("#!/bin/sh\nexec /opt/elsewhere/nvidia-smi \"$@\"\n")
    wrapper.chmod(0o755)
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    return root


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
