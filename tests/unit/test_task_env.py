"""The tasks' environment plan that ``hydria slurm start`` sends the shim (slurm/task_env.py).
What the shim makes of it in real tasks: tests/integration/test_slurm.py and test_slurm_mpi.py."""

from __future__ import annotations

import pytest

from hydria.slurm.task_env import StepFacts, first_host, plan

FACTS = StepFacts(job=4600, tasks=4, nodes=2, node_list="gpu[07-09,12]")


def block(marks: list[str], condition: str) -> list[str]:
    """The marks between ``@env-if condition`` and its ``@env-end``."""
    start = marks.index(f"@env-if {condition}")
    return marks[start + 1:marks.index("@env-end", start)]


def test_the_merge_keeps_the_tasks_own_slurm_variables_and_the_names_asked_for() -> None:
    marks = plan(["LC_ALL", "GREETING"], FACTS)
    merge = marks.index("@env-merge")
    assert marks[:merge] == ["@env-unset LANG", "@env-unset LANGUAGE", "@env-keep-prefix SLURM_",
                             "@env-keep-prefix PMIX_", "@env-keep-prefix PMI_", "@env-keep LC_ALL",
                             "@env-keep GREETING"]  # a kept locale stays; the prefixes' rules come first


def test_a_container_of_another_step_never_lends_its_slurm_variables() -> None:
    marks = plan([], FACTS._replace(foreign=True))
    assert [m for m in marks if "prefix" in m] == ["@env-skip-prefix SLURM_", "@env-skip-prefix PMIX_",
                                                   "@env-skip-prefix PMI_"]


@pytest.mark.parametrize(("has_directory", "gds"), [(True, "@env-copy-default PMIX_MCA_gds=PMIX_GDS_MODULE"),
                                                    (False, "@env-default PMIX_MCA_gds=hash")])
def test_pmix_selections_come_after_the_merge_for_pmix_tasks_only(has_directory: bool, gds: str) -> None:
    marks = plan([], FACTS._replace(pmix_directory=has_directory))
    assert marks.index("@env-if PMIX_SERVER_TMPDIR") > marks.index("@env-merge")
    assert sorted(block(marks, "PMIX_SERVER_TMPDIR")) == sorted(
        [gds, "@env-copy-default PMIX_MCA_psec=PMIX_SECURITY_MODE", "@env-copy-default PMIX_MCA_ptl=PMIX_PTL_MODULE"])


def test_pytorch_ranks_and_rendezvous() -> None:
    assert block(plan([], FACTS), "PYTORCH_VERSION") == [
        "@env-copy RANK=SLURM_PROCID", "@env-copy LOCAL_RANK=SLURM_LOCALID", "@env-default MASTER_ADDR=gpu07",
        "@env-default MASTER_PORT=61064", "@env-default WORLD_SIZE=4", "@env-default OMP_NUM_THREADS=1"]
    alone = block(plan([], StepFacts(job=1, tasks=1, nodes=1)), "PYTORCH_VERSION")  # batch: no step node list
    assert alone == ["@env-copy RANK=SLURM_PROCID", "@env-copy LOCAL_RANK=SLURM_LOCALID",
                     "@env-default MASTER_PORT=61001", "@env-default WORLD_SIZE=1"]


@pytest.mark.parametrize(("host_list", "first"), [
    ("n1,n2", "n1"), ("node1", "node1"), ("gpu[07-09,12]x", "gpu07x"), ("a[1-2]b[3-4],c", "a1b3"),
    ("rack[2]-n[010-011]", "rack2-n010"), ("", ""),
])
def test_first_host(host_list: str, first: str) -> None:
    assert first_host(host_list) == first
