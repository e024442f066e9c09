"""Image store benchmark: what a new image costs a step on N nodes, and a second user after it.

On the namespace cluster of ``testbed/slurm.py`` with N nodes, ``srun -N N --container-image=
REGISTRY#IMAGE true`` for an image of the busybox test image plus ``--size-mb`` of data layers,
cold, three ways side by side:

* per-node caches: each node's cache on its own disk (the layout sites are told to use);
* one shared cache: a sticky cache folder that every node and user shares;
* the image store: filled by the plugin as its owner (``store_owner``), users' caches per node.

Then a second user runs the same step. Printed per case: the registry's blob bytes served (in
image-equivalents), the wall time until every task ran, and the CPU seconds the machine spent
(all nodes share its 2 cores here: wall time grows with N where work is per node).

    python -m benchmarks.store_bench [--nodes 4 8] [--size-mb 512]     (as root)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compiled import compile_hydria
from benchmarks.import_bench import big_image
from testbed import slurm
from testbed.forwarding import Forwarder
from testbed.nodes import HEAD_ADDRESS
from testbed.oci import Image, push
from testbed.recipes import get_image
from testbed.registry import Registry
from testbed.users import STORE_USER, TEST_USERS, User, run_as
from testbed.workspace import Workspace

HYDRIA = str(Path(sys.executable).parent / "hydria")
STORE_CONF = Path("/etc/hydria/hydria.conf.d/60-hydria-store-bench.conf")


def cpu_seconds() -> float:
    """CPU time the whole machine has spent (all nodes are namespaces of it)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(v) for v in fields) - int(fields[3]) - int(fields[4])  # without idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def step(user: Workspace, nodes: int, image: str, cache: str) -> tuple[float, float]:
    env = {key: value for key, value in user.env().items() if key != "HYDRIA_SYSCONF_PATH"}
    env.update(SLURM_CONF=str(slurm.CONF), HYDRIA_DATA_PATH="", HYDRIA_TESTBED_CACHE=cache)
    began, cpu = time.perf_counter(), cpu_seconds()
    result = run_as(user.user, ["srun", f"-N{nodes}", f"--container-image={image}", "true"], env=env,
                    cwd=user.out, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"srun failed: {result.stderr}")
    return time.perf_counter() - began, cpu_seconds() - cpu


def served(registry: Registry, repository: str, sizes: dict[str, int]) -> int:
    return sum(sizes.get(digest, 0) * count for digest, count in registry.blob_fetches(repository).items())  # layers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--size-mb", type=int, default=512)
    options = parser.parse_args()
    compile_hydria()
    users = [User.lookup(name) for name in TEST_USERS]
    owner = User.lookup(STORE_USER)
    work = Path(tempfile.mkdtemp(prefix="hydria-store-bench-"))
    work.chmod(0o755)
    try:
        base = get_image("busybox", work)
        extra = big_image(options.size_mb, work)
        image = Image(base.layers + extra.layers, base.config)
        sizes = {layer.blob.digest: layer.blob.size for layer in image.layers}
        image_bytes = sum(sizes.values())
        print(f"image: {image_bytes / 1e6:.0f} MB of layers; bytes served in image-equivalents")
        print(f"{'nodes':>5}  {'case':<17} {'user':<6} {'served':>7} {'wall s':>7} {'CPU s':>7}")
        with Registry(work / "registry") as registry:
            for nodes in options.nodes:
                run_cluster(nodes, image, sizes, image_bytes, registry, users, owner, work)
    finally:
        STORE_CONF.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


def run_cluster(nodes: int, image: Image, sizes: dict[str, int], image_bytes: int, registry: Registry,
                users: list[User], owner: User, work: Path) -> None:
    slurm.start(HYDRIA, count=nodes, plugin_options=[f"store_owner={owner.name}"])
    try:
        with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
            for case in ("per-node caches", "one shared cache", "image store"):
                repository = f"bench/store-{nodes}-{case.split()[0]}"
                push([image], registry.address, repository, "latest", work)
                reference = f"{front.address}#{repository}:latest"
                caches = prepare(case, work, nodes, owner)
                for index, user in enumerate(users):
                    workspace = Workspace(user, workspace_root(work, user), HYDRIA)
                    before = served(registry, repository, sizes)
                    wall, cpu = step(workspace, nodes, reference, caches[index])
                    amount = (served(registry, repository, sizes) - before) / image_bytes
                    print(f"{nodes:>5}  {case:<17} {'first' if index == 0 else 'second':<6} {amount:>7.2f} "
                          f"{wall:>7.1f} {cpu:>7.1f}", flush=True)
                STORE_CONF.unlink(missing_ok=True)
    finally:
        slurm.stop()


def prepare(case: str, work: Path, nodes: int, owner: User) -> list[str]:
    """Each user's cache folder for the case (a node-local one names the node's TmpFS)."""
    stamp = f"{case.split()[0]}-{nodes}"
    if case == "one shared cache":
        shared = work / f"shared-cache-{stamp}"
        shared.mkdir(mode=0o1777)
        shared.chmod(0o1777)
        return [str(shared)] * 2
    if case == "image store":
        store = work / f"store-{stamp}"
        store.mkdir(mode=0o755)
        os.chown(store, owner.uid, owner.gid)
        shutil.rmtree(owner.home / ".cache" / "hydria", ignore_errors=True)
        run_as(owner, [HYDRIA, "store", "init"], env={"HYDRIA_STORE_PATH": str(store)}, check=True)
        STORE_CONF.parent.mkdir(parents=True, exist_ok=True)
        STORE_CONF.write_text(f"HYDRIA_STORE_PATH {store}\n")
    # slurm.node_tmp(NAME) is bound at ROOT/node-tmp on node NAME: the same path, each node's own folder
    for name in slurm.node_names(nodes):
        slurm.node_tmp(name).chmod(0o1777)
    return [str(slurm.ROOT / "node-tmp" / f"cache-{stamp}-{i}") for i in range(2)]


def workspace_root(work: Path, user: User) -> Path:
    root = work / f"ws-{user.name}"
    if not root.exists():
        for sub in ("", "out", "config"):
            (root / sub).mkdir()
            os.chown(root / sub, user.uid, user.gid)
    return root


if __name__ == "__main__":
    sys.exit(main())
