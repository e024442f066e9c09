"""The NVIDIA hook's pure parts: what is requested and which GPUs that names; the ld.so.cache reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hydria.hooks import ldcache
from hydria.hooks.nvidia import (
    CAPABILITIES,
    Gpu,
    MigDevice,
    NvidiaError,
    Selection,
    parse_mig_listing,
    plan,
    request_from,
    select,
)

GPUS = [Gpu(0, 2, "GPU-aaa", "0000:1a:00.0", "m"), Gpu(1, 0, "GPU-bbb", "0000:3b:00.0", "m"),
        Gpu(2, 1, "GPU-ccc", "0000:b1:00.0", "m")]


@pytest.mark.parametrize("value", [None, "", "void", " void "])
def test_nothing_requested(value: str | None) -> None:
    container = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
    assert request_from({}, container) is None


def test_host_wins_and_container_fills_in() -> None:
    request = request_from({"NVIDIA_VISIBLE_DEVICES": "1"},
                           {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
    assert request is not None
    assert (request.devices, request.capabilities, request.by_user) == ("1", ("compute", "utility"), True)
    from_image = request_from({}, {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert from_image is not None and not from_image.by_user


def test_gpus_asked_with_env_on_a_node_without_a_driver_are_an_error(tmp_path: Path) -> None:
    """``hydria start -e NVIDIA_VISIBLE_DEVICES=all`` asks as the host's variable does (said nothing
    on a node without GPUs); the image's own request alone starts without them. (A fake driver
    root: a node without one is what is tested.)"""
    asked = request_from({}, {"NVIDIA_VISIBLE_DEVICES": "all"}, frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    assert asked is not None and asked.by_user
    with pytest.raises(NvidiaError, match="NVIDIA_VISIBLE_DEVICES is set but this node has no NVIDIA driver loaded"):
        plan(asked, str(tmp_path), str(tmp_path), {})
    from_image = request_from({}, {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert from_image is not None and plan(from_image, str(tmp_path), str(tmp_path), {}) is None


def test_capabilities_default_all_and_unknown() -> None:
    assert request_from({"NVIDIA_VISIBLE_DEVICES": "all"}, {}).capabilities == ("utility",)  # type: ignore[union-attr]
    every = request_from({}, {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all"})
    assert every is not None and every.capabilities == CAPABILITIES
    with pytest.raises(NvidiaError, match="Unknown NVIDIA driver capability: cmpute"):
        request_from({}, {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "cmpute"})


def test_select_by_index_uuid_all_none() -> None:
    assert select(GPUS, "all").gpus == GPUS
    assert select(GPUS, "none").gpus == []
    assert select(GPUS, "2,GPU-aaa").gpus == [GPUS[2], GPUS[0]]
    assert select(GPUS, "1,1") == Selection([GPUS[1]], [])


def test_all_means_the_slurm_allocation_by_device_minor() -> None:
    assert select(GPUS, "all", slurm_gpus="0,1").gpus == [GPUS[1], GPUS[2]]


def test_unknown_devices_are_errors() -> None:
    with pytest.raises(NvidiaError, match="Unknown NVIDIA device: 7") as error:
        select(GPUS, "0,7")
    assert error.value.hint is not None and "GPU-bbb" in error.value.hint


SMI_LISTING = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaa)
  MIG 3g.20gb     Device  0: (UUID: MIG-a0)
  MIG 1g.5gb      Device  1: (UUID: MIG-a1)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbb)
GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-ccc)
  MIG 7g.40gb     Device  0: (UUID: MIG-c0)
"""


def test_mig_listing_parsed() -> None:
    assert parse_mig_listing(SMI_LISTING) == [MigDevice("GPU-aaa", 0, "MIG-a0"), MigDevice("GPU-aaa", 1, "MIG-a1"),
                                              MigDevice("GPU-ccc", 0, "MIG-c0")]


def test_mig_devices_by_uuid_and_index_pair() -> None:
    def listing() -> list[MigDevice]:
        return parse_mig_listing(SMI_LISTING)
    assert select(GPUS, "0:1,MIG-c0", mig_devices=listing) == Selection([GPUS[0], GPUS[2]], ["MIG-a1", "MIG-c0"])
    asked = []
    select(GPUS, "0,1", mig_devices=lambda: asked.append(1) or [])  # type: ignore[func-returns-value]
    assert asked == []  # nvidia-smi only runs when a MIG device is named
    with pytest.raises(NvidiaError, match="Unknown NVIDIA device: 1:0") as error:
        select(GPUS, "1:0", mig_devices=listing)
    assert error.value.hint is not None and "0:1 (MIG-a1)" in error.value.hint


def test_ld_cache_reader_agrees_with_ldconfig() -> None:
    """The host's real cache, read by hydria and listed by ldconfig -p."""
    with open("/etc/ld.so.cache", "rb") as handle:
        ours = {(name, path) for name, path in ldcache.entries(handle.read())}
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    theirs = {(line.split()[0], line.split(" => ")[1]) for line in listing.splitlines()[1:]
              if "x86-64" in line and " => " in line}
    assert ours == theirs and len(ours) > 10


def test_ld_cache_reader_ignores_garbage() -> None:
    assert list(ldcache.entries(b"not a cache")) == []
    assert list(ldcache.entries(ldcache.MAGIC + b"\xff" * 4)) == []
