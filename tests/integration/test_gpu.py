"""The built-in NVIDIA hook, as the unprivileged user, against a FAKE driver tree.

No GPU or NVIDIA driver can exist on the test machines: ``testbed.fakegpu`` builds the files the
hook reads (proc entries, libraries compiled under the driver's sonames, an nvidia-smi script) and
``HYDRIA_NVIDIA_DRIVER_ROOT`` points the hook at them. What is real: the mounts, the loader cache
that the image's own ldconfig rebuilds, and the image's loader finding ``libcuda.so.1``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import fakegpu
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

LOAD_LIBCUDA = ("import ctypes; print(ctypes.CDLL('libcuda.so.1').hydria_fake_driver_version())")


@pytest.fixture(scope="module")
def driver() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hydria-fake-nvidia-"))
    root.chmod(0o755)
    yield fakegpu.build(root)
    shutil.rmtree(root, ignore_errors=True)


def gpu_start(workspace: Workspace, driver: Path, *args: str, **env: str) -> tuple[int, str, str]:
    result = workspace.run("start", *args, HYDRIA_NVIDIA_DRIVER_ROOT=str(driver), **env)
    return result.returncode, result.stdout, result.stderr


def test_driver_libraries_and_utilities_reach_the_container(images: dict[str, Path], workspace: Workspace,
                                                           driver: Path) -> None:
    script = (f"nvidia-smi; python3 -c \"{LOAD_LIBCUDA}\"; readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1;"
              " ldconfig -p | grep -c 'libcuda.so.1 '; echo CVD=${CUDA_VISIBLE_DEVICES-unset}")
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c", script,
                                 NVIDIA_VISIBLE_DEVICES="all", NVIDIA_DRIVER_CAPABILITIES="compute,utility")
    assert status == 0, err
    assert out.splitlines() == [f"FAKE nvidia-smi, driver {fakegpu.VERSION}", "580",
                                f"libcuda.so.{fakegpu.VERSION}", "1", "CVD=unset"]


def test_capabilities_choose_the_libraries(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c",
                                 "ls /usr/lib/x86_64-linux-gnu | grep -E 'nvidia|cuda' | sort",
                                 NVIDIA_VISIBLE_DEVICES="all")  # default capability: utility
    assert status == 0, err
    assert out.split() == ["libnvidia-ml.so.1", f"libnvidia-ml.so.{fakegpu.VERSION}"]


def test_image_request_and_a_subset_of_gpus(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    # NVIDIA_VISIBLE_DEVICES from the container side (as CUDA images carry it), index 1 in PCI order.
    status, out, err = gpu_start(workspace, driver, "-e", "NVIDIA_VISIBLE_DEVICES=1", str(images["debian"]),
                                 "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; command -v nvidia-smi")
    assert status == 0, err
    assert out.split() == [fakegpu.GPUS[0].uuid, "/usr/bin/nvidia-smi"]


def test_mig_devices_by_index_pair_and_uuid(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    """MIG devices are listed by the node's nvidia-smi (here the fake one) and narrow CUDA to them."""
    status, out, err = gpu_start(workspace, driver, str(images["busybox"]), "sh", "-c", "echo $CUDA_VISIBLE_DEVICES",
                                 NVIDIA_VISIBLE_DEVICES=f"0:1,{fakegpu.MIG_DEVICES[0]}")
    assert (status, out) == (0, f"{fakegpu.MIG_DEVICES[1]},{fakegpu.MIG_DEVICES[0]}\n"), err
    status, _out, err = gpu_start(workspace, driver, str(images["busybox"]), "true", NVIDIA_VISIBLE_DEVICES="1:0")
    assert status == 1 and "Unknown NVIDIA device: 1:0" in err and f"0:1 ({fakegpu.MIG_DEVICES[1]})" in err


def test_private_dev_gets_the_device_nodes(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    """HYDRIA_RESTRICT_DEV: a /dev of the container's own, where the hook binds the driver's nodes
    (the fake driver's are plain files) for the chosen GPU only; with the host's /dev it binds none."""
    status, out, err = gpu_start(workspace, driver, str(images["busybox"]), "sh", "-c", "ls /dev | grep nvidia",
                                 NVIDIA_VISIBLE_DEVICES="1", HYDRIA_RESTRICT_DEV="y")
    assert status == 0, err
    assert out.split() == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidiactl"]


def test_named_container_starts_again_with_the_links(images: dict[str, Path], workspace: Workspace,
                                                     driver: Path) -> None:
    assert workspace.run("create", "--name", "gpu", str(images["debian"])).returncode == 0
    for _ in range(2):
        status, out, err = gpu_start(workspace, driver, "gpu", "python3", "-c", LOAD_LIBCUDA,
                                     NVIDIA_VISIBLE_DEVICES="0", NVIDIA_DRIVER_CAPABILITIES="compute")
        assert (status, out) == (0, "580\n"), err


def test_bad_requests_fail_clearly(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    status, _out, err = gpu_start(workspace, driver, str(images["busybox"]), "true", NVIDIA_VISIBLE_DEVICES="5")
    assert status == 1 and "Unknown NVIDIA device: 5" in err and fakegpu.GPUS[1].uuid in err
    status, _, err = gpu_start(workspace, driver, str(images["busybox"]), "true",
                                 NVIDIA_VISIBLE_DEVICES="all", NVIDIA_DRIVER_CAPABILITIES="compute,vidoe")
    assert status == 1 and "Unknown NVIDIA driver capability: vidoe" in err


def test_no_driver_on_the_node(images: dict[str, Path], workspace: Workspace) -> None:
    empty = workspace.root / "no-driver"
    empty.mkdir()
    # An image that asks for GPUs (here the site's environ.d, on the container's side as a CUDA
    # image's environment is) still starts on a CPU node ...
    environ_d = workspace.root / "etc" / "environ.d"
    environ_d.mkdir(parents=True, exist_ok=True)
    (environ_d / "cuda.env").write_text("NVIDIA_VISIBLE_DEVICES=all\n")
    status, out, err = gpu_start(workspace, empty, str(images["busybox"]), "sh", "-c",
                                 "echo $NVIDIA_VISIBLE_DEVICES; command -v nvidia-smi || echo none")
    assert (status, out) == (0, "all\nnone\n"), err
    # ... but a user who asks for them, on the host side or with --env, is told why there are none.
    status, out, err = gpu_start(workspace, empty, str(images["busybox"]), "true", NVIDIA_VISIBLE_DEVICES="0")
    assert status == 1 and "no NVIDIA driver" in err
    status, out, err = gpu_start(workspace, empty, "-e", "NVIDIA_VISIBLE_DEVICES=all", str(images["busybox"]), "true")
    assert status == 1 and "no NVIDIA driver" in err


def test_all_on_a_node_whose_driver_has_no_gpu_says_so(images: dict[str, Path], workspace: Workspace) -> None:
    """A driver tree (FAKE, as above) without a GPU: the container starts, and the user who asked
    for all GPUs is told that there are none rather than finding none inside."""
    (workspace.root / "gpuless/proc/driver/nvidia").mkdir(parents=True)
    driver = fakegpu.build(workspace.root / "gpuless", gpus=())
    status, _, err = gpu_start(workspace, driver, str(images["busybox"]), "true", NVIDIA_VISIBLE_DEVICES="all")
    assert status == 0, err
    assert "NVIDIA_VISIBLE_DEVICES=all: this node has no NVIDIA GPU, so the container gets none" in err


def test_void_does_nothing(images: dict[str, Path], workspace: Workspace, driver: Path) -> None:
    status, out, err = gpu_start(workspace, driver, str(images["busybox"]), "sh", "-c",
                                 "command -v nvidia-smi || echo none", NVIDIA_VISIBLE_DEVICES="void")
    assert (status, out) == (0, "none\n"), err


@pytest.fixture
def nvidia_spec(driver: Path) -> Iterator[Path]:
    """A CDI spec of the fake GPUs in the form NVIDIA's generator writes: each GPU by index and UUID,
    its node the host's /dev/null (a device every machine has), a variable saying which it was."""
    folder = Path(tempfile.mkdtemp(prefix="hydria-nvidia-cdi-"))
    folder.chmod(0o755)
    numbered = sorted(fakegpu.GPUS, key=lambda gpu: gpu.bus)  # nvidia-smi's indexes: PCI order
    devices = [{"name": name, "containerEdits": {"env": [f"CDI_GPU={index}"],
                                                 "deviceNodes": [{"path": f"/dev/nvidia{gpu.minor}",
                                                                  "hostPath": "/dev/null"}]}}
               for index, gpu in enumerate(numbered) for name in (str(index), gpu.uuid)]
    devices.append({"name": "all", "containerEdits": {"env": ["CDI_GPU=all"]}})
    (folder / "nvidia.json").write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
                                                    "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
                                                    "devices": devices}))
    yield folder
    shutil.rmtree(folder)


def test_the_site_can_give_nvidia_visible_devices_from_the_cdi_spec(images: dict[str, Path], workspace: Workspace,
                                                                   driver: Path, nvidia_spec: Path) -> None:
    """HYDRIA_NVIDIA_CDI: the GPUs that NVIDIA_VISIBLE_DEVICES names come from the node's CDI spec
    (not the built-in hook: no driver library is mounted), CUDA told the same UUIDs the built-in
    hook would tell it; under Slurm "all" is the job's GPUs. Without a spec, the built-in hook."""
    script = "echo $CDI_GPU ${CUDA_VISIBLE_DEVICES-unset}; ls -l /dev/nvidia0 | cut -c1; ls /usr/lib/x86_64-linux-gnu | grep -c nvidia; true"
    common = {"HYDRIA_NVIDIA_CDI": "y", "HYDRIA_CDI_SPEC_DIRS": str(nvidia_spec), "HYDRIA_RESTRICT_DEV": "y"}
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c", script,
                                 NVIDIA_VISIBLE_DEVICES="0", **common)
    assert status == 0, err
    first = min(fakegpu.GPUS, key=lambda gpu: gpu.bus)
    assert out.splitlines() == [f"0 {first.uuid}", "c", "0"]
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c", "echo $CDI_GPU",
                                 NVIDIA_VISIBLE_DEVICES="all", SLURM_STEP_GPUS=str(first.minor), **common)
    assert status == 0 and out == "0\n", err
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c", "echo $CDI_GPU",
                                 NVIDIA_VISIBLE_DEVICES="all", **common)
    assert status == 0 and out == "all\n", err
    status, out, err = gpu_start(workspace, driver, str(images["debian"]), "sh", "-c", script,
                                 NVIDIA_VISIBLE_DEVICES="0", **{**common, "HYDRIA_CDI_SPEC_DIRS": "/nowhere"})
    assert status == 0 and out.splitlines()[-1] != "0", err  # the built-in hook mounted the driver's libraries
