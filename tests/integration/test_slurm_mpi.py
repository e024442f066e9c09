"""MPI inside the container under the Slurm plugin, on the real test cluster: Open MPI + mpi4py
over PMIx (``srun --mpi=pmix``) and MPICH over PMI2 (``srun --mpi=pmi2``; Debian builds its Open
MPI without Slurm's PMI2), with the step's tasks in one container, and mpi4py started by
``srun hydria start`` in each task (the built-in Slurm hook)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import slurm

pytestmark = pytest.mark.integration

RANKS = ["rank 0 of 2 sum 3", "rank 1 of 2 sum 3"]


def ranks(output: str, library: str) -> list[str]:
    """The ranks' lines without the MPI library's name, checked to be ``library``'s."""
    lines = [line.partition(" lib ") for line in sorted(output.splitlines())]
    assert all(name.startswith(library) for _, _, name in lines), output
    return [rank for rank, _, _ in lines]


@pytest.mark.parametrize(("mpi", "program", "library"), [
    ("pmix", "mpi4py-hello", "Open MPI v4"),
    ("pmi2", "mpich-hello", "MPICH"),
])
def test_mpi_in_the_container(submit: slurm.Submitter, mpi_image: Path, mpi: str, program: str,
                              library: str) -> None:
    result = submit.run("srun", "-n", "2", f"--mpi={mpi}", f"--container-image={mpi_image}", program)
    assert result.returncode == 0, result.stderr
    assert ranks(result.stdout, library) == RANKS
    assert "PMIX ERROR" not in result.stderr


def test_pmi_fd_is_the_steps_socket(submit: slurm.Submitter, mpi_image: Path) -> None:
    out = submit.ok("srun", "-n", "2", "--mpi=pmi2", f"--container-image={mpi_image}", "sh", "-c",
                    'echo "$PMI_RANK $(readlink /proc/self/fd/$PMI_FD)"')
    lines = sorted(out.splitlines())
    assert [line.split()[0] for line in lines] == ["0", "1"]
    assert all(line.split()[1].startswith("socket:[") for line in lines)


def test_mpi_with_hydria_start_in_each_task(submit: slurm.Submitter, mpi_image: Path, hydria_bin: str) -> None:
    # Each task is a container of its own here, in a user namespace of its own: transports that
    # need one (MPICH's UCX shared memory) fail this way, which the plugin's one container avoids.
    result = submit.run("srun", "-n", "2", "--mpi=pmix", hydria_bin, "start", str(mpi_image), "mpi4py-hello")
    assert result.returncode == 0, result.stderr
    assert ranks(result.stdout, "Open MPI v4") == RANKS


def test_pmix_server_directory_and_selections_in_the_container(submit: slurm.Submitter, mpi_image: Path) -> None:
    """As enroot's 50-slurm-pmi hook (pyxis's suite: "PMIx mount", "PMIx environment variables"):
    the server's directory is a mount at its own path, and PMIX_MCA_psec/gds are the modes the
    server advertises, also in a named container that an earlier step created."""
    check = ('findmnt -n -o TARGET "${PMIX_SERVER_TMPDIR%/}" >/dev/null && echo "mounted '
             '$([ "$PMIX_MCA_psec" = "$PMIX_SECURITY_MODE" ] && [ "$PMIX_MCA_gds" = "$PMIX_GDS_MODULE" ] && '
             'echo same) $PMIX_RANK"')
    for container in ([f"--container-image={mpi_image}"], ["--container-name=pmix-named"]):
        if container == ["--container-name=pmix-named"]:
            submit.ok("srun", f"--container-image={mpi_image}", "--container-name=pmix-named", "true")
        out = submit.ok("srun", "-n", "2", "--mpi=pmix", *container, "sh", "-c", check)
        assert sorted(out.splitlines()) == ["mounted same 0", "mounted same 1"], container


def test_a_pmix_step_in_a_container_that_another_step_started(submit: slurm.Submitter, mpi_image: Path) -> None:
    """A step that joins another step's running container (--container-name) finds no server
    directory of its own there (the container's mounts are the first step's): its clients keep
    their data in their own memory (PMIX_MCA_gds=hash), and Open MPI runs."""
    first = f"srun -n 1 --overlap --container-image={mpi_image} --container-name=pmix-joined sleep 10"
    second = ("srun -n 2 --overlap --mpi=pmix --container-name=pmix-joined sh -c "
              "'echo gds=$PMIX_MCA_gds; exec mpi4py-hello'")
    out = submit.ok("salloc", "-n", "2", "sh", "-c", f"{first} & sleep 3; {second}; wait")
    lines = out.splitlines()
    assert sorted(line for line in lines if line.startswith("gds=")) == ["gds=hash", "gds=hash"], out
    assert ranks("\n".join(line for line in lines if not line.startswith("gds=")), "Open MPI v4") == RANKS
