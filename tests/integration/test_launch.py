"""Multi-node without Slurm: ``hydria start IMAGE mpirun --hostfile ...`` on the first of two test
nodes (testbed/nodes.py: network namespaces with an sshd each). Open MPI starts its daemon on the
second node through hydria's launch agent (ssh, then the same ``hydria start`` there), so the
ranks run in the image on both nodes; the test user writes no hook and no agent."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nodes
from testbed.users import User
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration

NAMES = nodes.names(2)


@pytest.fixture(scope="module")
def two_nodes(test_user: User) -> Iterator[None]:
    nodes.create(2)
    nodes.start_sshd(2, test_user)
    deadline = time.monotonic() + 20
    for i in range(2):
        while True:
            try:
                subprocess.run(["nsenter", f"--net=/run/netns/{NAMES[i]}", "true"], check=True)
                with socket.create_connection((nodes.address(i), 22), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    yield
    nodes.destroy()


def on_first_node(workspace: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``hydria ARGS`` as the test user on the first node, from the workspace's out folder."""
    user = workspace.user
    environment = [f"{key}={value}" for key, value in user.environment(workspace.env(**env)).items()]
    argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "env", "-i",
            *environment, "sh", "-c", 'cd "$1" && shift && exec "$@"', "-", str(workspace.out),
            workspace.hydria, *args]
    return subprocess.run(nodes.in_node(NAMES[0], argv), capture_output=True, text=True, timeout=300, check=False)


def out_folder(workspace: Workspace) -> list[str]:
    """The workspace's out folder (the host file) in the container, at the same path."""
    return ["--mount", f"{workspace.out}:{workspace.out}:none:x-create=dir,bind"]


@pytest.fixture
def hostfile(workspace: Workspace) -> Path:
    path = workspace.out / "hosts"
    path.write_text("".join(f"{nodes.address(i)} slots=1\n" for i in range(2)))
    return path


def test_mpirun_starts_ranks_in_the_container_on_every_node(two_nodes: None, workspace: Workspace,
                                                            mpi_image: Path, hostfile: Path) -> None:
    mpirun = ["mpirun", "--hostfile", str(hostfile), "-np", "2", "--map-by", "node"]
    result = on_first_node(workspace, "start", *out_folder(workspace), str(mpi_image), *mpirun, "sh", "-c",
                           'echo "$(hostname) $(ls /usr/local/bin/mpi4py-hello)"')
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"{name} /usr/local/bin/mpi4py-hello" for name in NAMES]
    result = on_first_node(workspace, "start", *out_folder(workspace), str(mpi_image), *mpirun, "mpi4py-hello")
    assert result.returncode == 0, result.stderr
    ranks = sorted(line.partition(" lib ")[0] for line in result.stdout.splitlines())
    assert ranks == ["rank 0 of 2 sum 3", "rank 1 of 2 sum 3"], result.stdout


def test_remote_starts_repeat_this_starts_options(two_nodes: None, workspace: Workspace, mpi_image: Path,
                                                  hostfile: Path) -> None:
    shared = workspace.out / "shared"
    shared.mkdir()
    (shared / "note").write_text("mounted\n")
    subprocess.run(["chown", "-R", f"{workspace.user.uid}", str(shared)], check=True)
    result = on_first_node(workspace, "start", "--root", "--env", "GREETING=hello", *out_folder(workspace), "--mount",
                           f"{shared}:/srv/shared:none:x-create=dir,bind,ro", str(mpi_image),
                           "mpirun", "--allow-run-as-root", "--hostfile", str(hostfile), "-np", "2", "--map-by", "node",
                           "sh", "-c", 'echo "$(hostname) $(id -u) $GREETING $(cat /srv/shared/note)"',
                           HYDRIA_MOUNT_HOME="n")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"{name} 0 hello mounted" for name in NAMES]


def test_a_launch_agent_the_user_chose_is_kept(two_nodes: None, workspace: Workspace, mpi_image: Path,
                                              hostfile: Path) -> None:
    result = on_first_node(workspace, "start", str(mpi_image), "sh", "-c",
                           "test -e /.hydria-launch && echo agent; echo ${OMPI_MCA_plm_rsh_agent:-unset}")
    assert result.stdout == "unset\n"  # not an MPI launcher: nothing set up
    result = on_first_node(workspace, "start", "--env", "OMPI_MCA_plm_rsh_agent=/bin/false", *out_folder(workspace),
                           str(mpi_image),
                           "mpirun", "--hostfile", str(hostfile), "-np", "2", "--map-by", "node", "true")
    assert result.returncode != 0  # Open MPI used the user's agent, which cannot start anything
