"""The built-in Slurm hook's choices (hooks/slurm_pmi.py)."""

from __future__ import annotations

import os
from pathlib import Path

from hydria.hooks import slurm_pmi


def test_outside_a_step_nothing_passes() -> None:
    assert slurm_pmi.run({"PMIX_RANK": "0", "SLURM_JOB_ID": "4"}) == ({}, [])


def test_pmix_variables_selections_and_directories(tmp_path: Path) -> None:
    server = tmp_path / "spool" / "pmix.4.0"
    server.mkdir(parents=True)
    appdir = tmp_path / f"spmix_appdir_{os.getuid()}_4.0"
    appdir.mkdir()
    host = {"SLURM_JOB_ID": "4", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "PMIX_RANK": "1",
            "PMIX_SERVER_TMPDIR": f"{server}/", "PMIX_SYSTEM_TMPDIR": str(tmp_path),
            "PMIX_GDS_MODULE": "ds21,ds12,hash", "PMIX_SECURITY_MODE": "munge,native",
            "PMIX_MCA_psec": "native", "HOME": "/home/u"}
    environment, mounts = slurm_pmi.run(host)
    assert environment["SLURM_PROCID"] == "1" and environment["PMIX_RANK"] == "1"  # the caller's own task
    assert environment["PMIX_MCA_gds"] == "ds21,ds12,hash"  # what the server advertises
    assert environment["PMIX_MCA_psec"] == "native"  # the user's own choice wins
    assert "HOME" not in environment
    assert [(m.source, m.target) for m in mounts] == [(str(server), str(server)), (str(appdir), str(appdir))]


def test_pmi2_passes_its_variables_without_mounts() -> None:
    environment, mounts = slurm_pmi.run({"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "PMI_FD": "11",
                                         "PMI_RANK": "0", "SLURM_MPI_TYPE": "pmi2"})
    assert environment == {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "PMI_FD": "11", "PMI_RANK": "0",
                           "SLURM_MPI_TYPE": "pmi2"}
    assert mounts == []


def test_application_directory_in_slurms_tmpfs(tmp_path: Path) -> None:
    # The Slurm plugin's step container starts before the tasks' PMIX_* variables exist; the
    # application directory is in slurm.conf's TmpFS, not in /tmp.
    tmpfs = tmp_path / "local-scratch"
    appdir = tmpfs / f"spmix_appdir_{os.getuid()}_9.2"
    appdir.mkdir(parents=True)
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=c\n# TmpFS=/nowhere\ntmpfs = {tmpfs}  # node-local\n")
    host = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2", "SLURM_PMIX_MAPPING_SERV": "(vector,(0,2,1))",
            "SLURM_CONF": str(conf)}
    assert [m.source for m in slurm_pmi.pmix_mounts(host)] == [str(appdir)]
    without_pmix = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2", "SLURM_CONF": str(conf), "SLURM_MPI_TYPE": "pmi2"}
    assert slurm_pmi.pmix_mounts(without_pmix) == []
