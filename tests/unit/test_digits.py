"""A number in text is ASCII digits (hydria.digits): a digit that ``int`` refuses (``²``) or one of
another script (``٣``), in a setting, a device list, a stage or a registry's port, gets the error
of a value that is not a number, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from hydria.config import Context, resolve
from hydria.digits import is_number
from hydria.errors import ConfigError, HydriaError
from hydria.hooks import infiniband
from hydria.hooks.nvidia import Gpu, NvidiaError, select
from hydria.image.ref.reference import InvalidReference, parse
from hydria.imagebuild import dockerfile
from testbed import fakeib

SUPERSCRIPT_TWO, ARABIC_THREE = "\u00b2", "\u0663"
NOT_ASCII = pytest.mark.parametrize("digit", [SUPERSCRIPT_TWO, ARABIC_THREE])


@pytest.mark.parametrize(("text", "expected"), [
    ("0", True), ("4096", True), ("", False), ("-1", False), ("4 2", False), (" 7", False),
    (SUPERSCRIPT_TWO, False), (ARABIC_THREE, False), ("1" + SUPERSCRIPT_TWO, False)])
def test_only_ascii_digits_are_a_number(text: str, expected: bool) -> None:
    assert is_number(text) is expected


@NOT_ASCII
def test_a_setting(digit: str) -> None:
    context = Context(uid=1001, user="ada", home="/home/ada", hostname="node07", nproc=4,
                      package_dir="/opt/hydria", runtime_default="/run/user/1001/hydria")
    with pytest.raises(ConfigError, match="HYDRIA_MAX_PROCESSORS.*not a non-negative integer"):
        resolve([], {"HOME": "/home/ada", "HYDRIA_MAX_PROCESSORS": digit}, context)


@NOT_ASCII
def test_gpus_and_infiniband_devices(digit: str, tmp_path: Path) -> None:
    with pytest.raises(NvidiaError, match="Unknown NVIDIA device"):
        select([Gpu(0, 0, "GPU-aaa", "0000:1a:00.0", "m")], digit)
    devices = infiniband.discover(str(fakeib.build(tmp_path)))
    with pytest.raises(HydriaError, match="Unknown MELLANOX device id"):
        infiniband.select(devices, digit)


@NOT_ASCII
def test_a_stage_and_a_registrys_port(digit: str) -> None:
    assert dockerfile.parse("FROM a\nFROM b\n").stage(digit) is None
    with pytest.raises(InvalidReference, match="Invalid image reference"):
        parse(f"docker://registry.example:{digit}#image")
