"""Steps across nodes: the test cluster with two nodes, each slurmd in network, UTS, PID and mount
namespaces of its own (testbed/slurm.py), so that each node has its own address, host name and
processes, as on a real cluster with a shared home. Each node keeps its containers in a data path
that names the node (``${HOSTNAME}`` in the configuration), as admins put it on node-local disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hydria.config import SPEC_BY_NAME
from hydria.image.kept.store import ImageStore
from hydria.image.ref.manifest import parse_platform
from hydria.image.ref.reference import parse
from testbed import slurm
from testbed.authproxy import AuthProxy
from testbed.forwarding import Forwarder
from testbed.nodes import HEAD_ADDRESS
from testbed.oci import push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.users import STORE_USER
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

NODES = slurm.node_names(2)
RENDEZVOUS = """\
import os, socket, time
rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
if rank == 0:
    with socket.create_server(("", port)) as server:
        connection, _ = server.accept()
        print("rank 0 on", socket.gethostname(), "heard:", connection.recv(100).decode())
else:
    for _ in range(100):
        try:
            with socket.create_connection((os.environ["MASTER_ADDR"], port)) as connection:
                connection.sendall(f"rank {rank} of {os.environ['WORLD_SIZE']} on {socket.gethostname()}".encode())
                break
        except OSError:
            time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def cluster(hydria_bin: str) -> Iterator[None]:
    slurm.start(hydria_bin, count=2, plugin_options=[f"store_owner={STORE_USER}"])
    yield
    slurm.stop()


@pytest.fixture
def nodes(submit: slurm.Submitter) -> slurm.Submitter:
    """The submitter; the test cluster's site file makes hydria's data path per node (its
    ``$HOSTNAME``), for steps and for hydria commands run in a job (HYDRIA_DATA_PATH="")."""
    return submit


def test_every_node_runs_its_tasks_in_the_container(nodes: slurm.Submitter, images: dict[str, Path]) -> None:
    out = nodes.ok("srun", "-N2", f"--container-image={images['busybox']}", "sh", "-c",
                   'echo "$SLURM_NODEID $(hostname) $(grep PRETTY /etc/os-release)"', HYDRIA_DATA_PATH="")
    assert sorted(out.splitlines()) == [f'{i} {node} PRETTY_NAME="hydria busybox test image"'
                                        for i, node in enumerate(NODES)]


def test_a_registry_image_on_every_node(nodes: slurm.Submitter, busybox: PublishedImage,
                                         registry: Registry) -> None:
    """Both nodes import the image into the same shared temporary folder: each into its own."""
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#{busybox.docker_uri.split('#', 1)[1]}"
        for attempt in ("cold", "kept"):  # the second step finds the image kept in the shared cache
            out = nodes.ok("srun", "-N2", f"--container-image={image}", "sh", "-c",
                           'echo "$(hostname) $(grep PRETTY /etc/os-release)"', HYDRIA_DATA_PATH="")
            assert sorted(out.splitlines()) == [f'{node} PRETTY_NAME="hydria busybox test image"'
                                                for node in NODES], attempt


def test_a_stored_image_serves_every_node(nodes: slurm.Submitter, busybox: PublishedImage, registry: Registry,
                                          site_store: Path, store_workspace: Workspace, workspace: Workspace) -> None:
    """An image in the image store (docs/store.md): every node of a step starts it from there
    (the user's cache is empty), and the registry serves no blob, only each node's manifest request."""
    push([busybox.image], registry.address, "hydria/stored-nodes", "latest", store_workspace.root)
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#hydria/stored-nodes:latest"
        store_workspace.fill_store(site_store, image)
        served = registry.blob_fetches("hydria/stored-nodes")
        out = nodes.ok("srun", "-N2", f"--container-image={image}", "sh", "-c",
                       'echo "$(hostname) $(grep PRETTY /etc/os-release)"', HYDRIA_DATA_PATH="",
                       HYDRIA_TESTBED_CACHE=str(workspace.root / "empty-cache"))
    assert sorted(out.splitlines()) == [f'{node} PRETTY_NAME="hydria busybox test image"' for node in NODES]
    assert registry.blob_fetches("hydria/stored-nodes") == served
    blobs = workspace.root / "empty-cache" / "blobs" / "sha256"
    assert not blobs.exists() or list(blobs.iterdir()) == []


@pytest.fixture(params=["one image file", "layered"])
def store_layout(request: pytest.FixtureRequest, site_store: Path) -> Iterator[str]:
    """How the site's store keeps images: one file each, or layered (HYDRIA_LAYERED_IMAGES in the
    system configuration: docs/store.md)."""
    conf = Path("/etc/hydria/hydria.conf.d/61-hydria-testbed-layered.conf")
    conf.write_text(f"HYDRIA_LAYERED_IMAGES {'y' if request.param == 'layered' else 'n'}\n")
    yield request.param
    conf.unlink(missing_ok=True)


def test_a_step_fills_the_store_once_for_every_node_and_user(cluster: None, debian: PublishedImage, registry: Registry,
                                                            site_store: Path, store_layout: str,
                                                            store_workspace: Workspace, workspace: Workspace,
                                                            other_workspace: Workspace) -> None:
    """The store lacks the image: the plugin has the store's owner import it (plugstack
    store_owner), once for both nodes of the step, and a second user's step downloads nothing;
    with a layered store, every node starts the layered entry in place."""
    repository = f"hydria/filled-{store_layout.replace(' ', '-')}"  # blobs counted per layout
    push([debian.image], registry.address, repository, "latest", store_workspace.root)
    assert store_workspace.run("store", "init", HYDRIA_STORE_PATH=str(site_store)).returncode == 0
    # The plugin runs the owner's import with the owner's own settings: its cache in its home.
    shutil.rmtree(store_workspace.user.home / ".cache" / "hydria", ignore_errors=True)
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#{repository}:latest"
        for user in (workspace, other_workspace):
            result = slurm.Submitter(user).run("srun", "-N2", f"--container-image={image}", "sh", "-c",
                                               "hostname; test -x /usr/bin/apt", HYDRIA_DATA_PATH="",
                                               HYDRIA_TESTBED_CACHE=str(user.root / "cache"))
            assert result.returncode == 0, result.stderr
            assert sorted(result.stdout.split()) == NODES
            if user is workspace:  # each node asked the store's owner; one imported, any other waited for it
                assert f"hydria: importing into the image store: docker://{image}" in result.stderr, result.stderr
            fetches = registry.blob_fetches(repository)
            assert fetches and set(fetches.values()) == {1}, (user.user.name, fetches)
    files = list((site_store / "images").iterdir())
    entries = [path for path in files if not path.name.startswith("layer-")]
    assert len(entries) == 1 and {path.stat().st_uid for path in files} == {store_workspace.user.uid}
    assert entries[0].suffix == (".layers" if store_layout == "layered" else ".sqsh")
    for user in (workspace, other_workspace):
        blobs = user.root / "cache" / "blobs" / "sha256"
        assert not blobs.exists() or list(blobs.iterdir()) == []


def test_a_step_takes_over_a_dead_importers_store_lock(cluster: None, busybox: PublishedImage, registry: Registry,
                                                      site_store: Path, store_workspace: Workspace,
                                                      workspace: Workspace) -> None:
    """An importer that died (its node crashed) left the store's lock for the step's image: a node
    of the next step takes it over once stale, both nodes run, and the entry is whole."""
    push([busybox.image], registry.address, "hydria/orphaned", "latest", store_workspace.root)
    assert store_workspace.run("store", "init", HYDRIA_STORE_PATH=str(site_store)).returncode == 0
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#hydria/orphaned:latest"
        digest = store_workspace.run("digest", f"docker://{image}").stdout.strip()
        key = ImageStore.key(parse(f"docker://{image}").uri, digest, SPEC_BY_NAME["SQUASH_OPTIONS"].default,
                             parse_platform(None), layered=True)  # the store's default layout
        lock = site_store / "locks" / f"{key}.lock"
        lock.write_text("crashed-node.4242\n")
        os.chown(lock, store_workspace.user.uid, store_workspace.user.gid)
        os.utime(lock, (time.time() - 600, time.time() - 600))
        result = slurm.Submitter(workspace).run("srun", "-N2", f"--container-image={image}", "hostname",
                                                HYDRIA_DATA_PATH="")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == NODES
    assert "hydria: Taking over the import of" in result.stderr, result.stderr
    assert "node crashed-node, process 4242 has not touched its lock" in result.stderr
    assert (site_store / "images" / f"{key}.layers").is_file() and not lock.exists()


def test_stage_broadcasts_an_image_to_every_node(nodes: slurm.Submitter, busybox: PublishedImage,
                                                registry: Registry, workspace: Workspace) -> None:
    """hydria stage in a batch script: one import on the batch host, sbcast to both nodes' own
    disks, and the job's container step downloads no blob on either node."""
    push([busybox.image], registry.address, "hydria/staged", "latest", workspace.root)
    for name in NODES:
        slurm.node_tmp(name).chmod(0o1777)
    local = slurm.ROOT / "node-tmp"  # one path, each node's own folder (its TmpFS)
    cache = f"{local}/stage-cache-{workspace.user.uid}"
    with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
        image = f"{front.address}#hydria/staged:latest"
        script = f"hydria stage {image} && srun -N2 --container-image={image} sh -c 'echo $(hostname) in $(grep PRETTY /etc/os-release)'"
        nodes.ok("sbatch", "--wait", "-N2", "-o", "staged.out", "--wrap", script, HYDRIA_DATA_PATH="",
                 HYDRIA_TEMP_PATH=str(local), HYDRIA_CACHE_PATH=cache, HYDRIA_TESTBED_CACHE=cache)
    output = (workspace.out / "staged.out").read_text()
    assert f"staged {image} on 2 node(s)" in output, output
    assert sorted(line for line in output.splitlines() if " in PRETTY_NAME" in line) == \
        [f'{node} in PRETTY_NAME="hydria busybox test image"' for node in NODES], output
    fetches = registry.blob_fetches("hydria/staged")
    assert fetches and set(fetches.values()) == {1}, fetches  # the batch host's import only
    for name in NODES:
        kept = slurm.node_tmp(name) / f"stage-cache-{workspace.user.uid}" / f"images.{workspace.user.uid}"
        assert len(list(kept.glob("*.sqsh"))) == 1, name
        assert not list(slurm.node_tmp(name).glob(".hydria-stage-*")), name  # the broadcast file adopted


def test_a_named_container_lives_on_each_node(nodes: slurm.Submitter, images: dict[str, Path],
                                              workspace: Workspace) -> None:
    nodes.ok("srun", "-N2", f"--container-image={images['busybox']}", "--container-name=kept", "--container-writable", "sh", "-c",
             'hostname > "/written-on-$(hostname)"', HYDRIA_DATA_PATH="")
    out = nodes.ok("srun", "-N2", "--container-name=kept", "--container-writable", "sh", "-c", 'echo "$(hostname)" /written-on-*',
                   HYDRIA_DATA_PATH="")
    assert sorted(out.splitlines()) == [f"{node} /written-on-{node}" for node in NODES]
    for node in NODES:
        assert [p.name for p in (workspace.root / "data" / node).iterdir()] == ["pyxis_kept"]


@pytest.fixture
def shared_home(workspace: Workspace) -> Iterator[Path]:
    """A folder that every node mounts over one backing folder, as nodes mount an NFS home. The
    test machines' kernel has no NFS client: each node mounts it with FUSE (bindfs, as root with
    allow_other) in its own mount namespace."""
    backing, mount_point = workspace.root / "home-server", workspace.root / "shared-home"
    for folder in (backing, mount_point):
        folder.mkdir()
        os.chown(folder, workspace.user.uid, workspace.user.gid)
    for node in NODES:
        mounted = slurm.on_node(node, ["bindfs", "-o", "allow_other", str(backing), str(mount_point)])
        assert mounted.returncode == 0, mounted.stderr
    yield mount_point
    for node in NODES:
        slurm.on_node(node, ["umount", "-l", str(mount_point)])


def test_containers_on_a_data_path_the_nodes_share(nodes: slurm.Submitter, images: dict[str, Path],
                                                   shared_home: Path, workspace: Workspace) -> None:
    """A named container is not written from two nodes at once (two overlays over one upper
    directory); one node after the other is fine, and a step's temporary containers (to save the
    writes) are each node's own."""
    data = shared_home / "data"
    stored = workspace.root / "home-server" / "data"  # what the nodes see in data: the mount is theirs only
    shared = {"HYDRIA_DATA_PATH": "", "HYDRIA_TESTBED_DATA": str(data), "HYDRIA_TESTBED_NODE_FOLDER": ""}
    image = f"--container-image={images['busybox']}"
    refused = nodes.run("srun", "-N2", image, "--container-name=both", "true", **shared)
    assert refused.returncode != 0
    assert f"container pyxis_both: this step runs on 2 nodes, which share the data path {data} (fuse)" \
        in refused.stderr, refused.stderr
    assert "run the step on one node (-N1)" in refused.stderr and "Traceback" not in refused.stderr
    assert not stored.exists() or list(stored.iterdir()) == []
    nodes.ok("srun", "-N1", "-w", NODES[0], image, "--container-name=both", "--container-writable", "sh", "-c",
             "hostname > /made-on", **shared)
    assert nodes.ok("srun", "-N1", "-w", NODES[1], "--container-name=both", "cat", "/made-on", **shared) == f"{NODES[0]}\n"
    assert nodes.ok("srun", "-N2", image, "--container-save=saved.sqsh", "--container-writable", "sh", "-c",
                    "hostname > /saved-on", **shared) == ""
    listing = subprocess.run(["unsquashfs", "-cat", str(workspace.out / "saved.sqsh"), "saved-on"],
                             capture_output=True, text=True, check=True).stdout
    assert listing.strip() in NODES
    containers = sorted(p.name for p in stored.iterdir() if not p.name.startswith("."))  # as hydria list shows them
    assert containers == ["pyxis_both"]  # the temporary ones removed
    copies = stored / ".images"  # the image, copied once where the shared file system links none
    assert not copies.exists() or [p.stat().st_nlink for p in copies.iterdir()] in ([], [2])


@pytest.mark.parametrize(("mpi", "program", "library"), [
    ("pmix", "mpi4py-hello", "Open MPI v4"),
    ("pmi2", "mpich-hello", "MPICH"),
])
def test_mpi_across_nodes(nodes: slurm.Submitter, mpi_image: Path, mpi: str, program: str, library: str) -> None:
    # The two nodes share one kernel and /dev/shm: UCX (MPICH's transport) would take its shared-memory
    # paths between them and time out; a real cluster's nodes reach each other over their network.
    result = nodes.run("srun", "-N2", "-n2", "-l", f"--mpi={mpi}", f"--container-image={mpi_image}", "sh", "-c",
                       f"hostname; exec {program}", HYDRIA_DATA_PATH="", UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0")
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert lines[0] == f"0: {NODES[0]}" and lines[2] == f"1: {NODES[1]}", result.stdout
    assert lines[1].startswith("0: rank 0 of 2 sum 3 lib " + library), result.stdout
    assert lines[3].startswith("1: rank 1 of 2 sum 3 lib " + library), result.stdout
    assert "PMIX ERROR" not in result.stderr


def test_pytorch_rendezvous_across_nodes(nodes: slurm.Submitter, mpi_image: Path, workspace: Workspace) -> None:
    script = workspace.out / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    out = nodes.ok("srun", "-N2", "-n2", f"--container-image={mpi_image}", f"--container-mounts={script}:/rdv.py",
                   "python3", "/rdv.py", HYDRIA_DATA_PATH="", PYTORCH_VERSION="2.1")
    assert out == f"rank 0 on {NODES[0]} heard: rank 1 of 2 on {NODES[1]}\n"


def test_doctor_checks_every_node(nodes: slurm.Submitter, images: dict[str, Path], hydria_bin: str) -> None:
    result = nodes.run(hydria_bin, "doctor", "--cluster", "--image", str(images["busybox"]), "--", "-N2",
                       HYDRIA_DATA_PATH="")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{NODES[0]}: ok", f"{NODES[1]}: ok",
                                          f"a step in {images['busybox']} on every node: ok ({NODES[0]}, {NODES[1]})",
                                          "all nodes passed"]
    report = json.loads(nodes.ok(hydria_bin, "doctor", "--cluster", "--json", "--", "-N2", HYDRIA_DATA_PATH=""))
    assert [node["node"] for node in report["nodes"]] == NODES
    plugin = [check for node in report["nodes"] for check in node["checks"] if check["name"] == "slurm plugin"]
    assert [check["status"] for check in plugin] == ["ok", "ok"]
    broken = nodes.run(hydria_bin, "doctor", "--cluster", "--", "-N2", HYDRIA_DATA_PATH="/root/nowhere")
    assert broken.returncode == 1
    assert f"{NODES[1]}: FAIL: HYDRIA_DATA_PATH: /root/nowhere is not writable" in broken.stdout


def test_a_store_import_that_fails_says_why_in_the_step_and_slurmds_log(
        cluster: None, busybox: PublishedImage, registry: Registry, site_store: Path, store_workspace: Workspace,
        workspace: Workspace) -> None:
    """The store's owner cannot import (here: its cache folder is not its own to create): the step
    still runs from the user's own import, and both the step's log and slurmd's say why."""
    push([busybox.image], registry.address, "hydria/unstored", "latest", store_workspace.root)
    assert store_workspace.run("store", "init", HYDRIA_STORE_PATH=str(site_store)).returncode == 0
    cache = store_workspace.user.home / ".cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(mode=0o755)  # root's: the owner's default cache path cannot be made in it
    try:
        with Forwarder(registry.address, host=HEAD_ADDRESS) as front:
            image = f"{front.address}#hydria/unstored:latest"
            result = slurm.Submitter(workspace).run("srun", "-N1", f"--container-image={image}", "true",
                                                    HYDRIA_DATA_PATH="")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    said = f"hydria: the image store could not import docker://{image}: "
    assert said in result.stderr and "HYDRIA_CACHE_PATH" in result.stderr, result.stderr
    assert "; importing it for this job" in result.stderr
    assert f"the image store (written as {STORE_USER}) could not import docker://{image}: " in slurm.slurmd_logs()


def test_a_private_image_runs_from_the_users_own_import(cluster: None, busybox: PublishedImage, registry: Registry,
                                                       site_store: Path, store_workspace: Workspace,
                                                       workspace: Workspace) -> None:
    """An image that needs credentials never enters the store (docs/store.md): the plugin's store
    import says so, and the step runs from the user's own import with the user's credentials."""
    push([busybox.image], registry.address, "hydria/private-step", "latest", store_workspace.root)
    assert store_workspace.run("store", "init", HYDRIA_STORE_PATH=str(site_store)).returncode == 0
    workspace.write_credentials(f"machine {HEAD_ADDRESS} login ada password s3cret\n")
    with AuthProxy(registry.address, host=HEAD_ADDRESS) as proxy:
        image = f"{proxy.address}#hydria/private-step:latest"
        result = slurm.Submitter(workspace).run("srun", "-N1", f"--container-image={image}", "cat", "/etc/os-release",
                                                HYDRIA_DATA_PATH="")
    assert result.returncode == 0, result.stderr
    assert "hydria busybox test image" in result.stdout
    assert f"hydria: the image store could not import docker://{image}: docker://{image} cannot be pulled " \
           "without credentials" in result.stderr, result.stderr
    assert list((site_store / "images").iterdir()) == []
