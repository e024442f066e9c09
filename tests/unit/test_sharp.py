"""The SHARP hook's environment (enroot's 50-sharp.sh)."""

from hydria.hooks import sharp

STEP = {"SLURM_NETWORK": "sharp", "MELLANOX_VISIBLE_DEVICES": "all", "SLURM_STEP_NUM_NODES": "4"}


def test_a_sharp_step_with_mellanox_devices_gets_the_collective_settings() -> None:
    assert sharp.environment(STEP, {}) == {
        "SHARP_COLL_LOCK_ON_COMM_INIT": "1", "SHARP_COLL_NUM_COLL_GROUP_RESOURCE_ALLOC_THRESHOLD": "0",
        "NCCL_COLLNET_ENABLE": "1", "NCCL_SHARP_GROUP_SIZE_THRESH": "4"}


def test_what_the_container_sets_is_kept() -> None:
    added = sharp.environment(STEP, {"NCCL_COLLNET_ENABLE": "0", "NCCL_SHARP_GROUP_SIZE_THRESH": "2"})
    assert "NCCL_COLLNET_ENABLE" not in added and "NCCL_SHARP_GROUP_SIZE_THRESH" not in added
    assert added["SHARP_COLL_LOCK_ON_COMM_INIT"] == "1"


def test_the_devices_may_come_from_the_image_and_the_node_count_from_open_mpi() -> None:
    host = {"SLURM_NETWORK": "sharp", "OMPI_MCA_orte_num_nodes": "3"}
    assert sharp.environment(host, {"MELLANOX_VISIBLE_DEVICES": "0"})["NCCL_SHARP_GROUP_SIZE_THRESH"] == "3"
    assert "NCCL_SHARP_GROUP_SIZE_THRESH" not in sharp.environment({"SLURM_NETWORK": "sharp"},
                                                                   {"MELLANOX_VISIBLE_DEVICES": "0"})


def test_inactive_without_sharp_network_or_without_devices() -> None:
    assert sharp.environment({**STEP, "SLURM_NETWORK": "ib"}, {}) == {}
    for devices in ("void", "none", ""):
        assert sharp.environment({**STEP, "MELLANOX_VISIBLE_DEVICES": devices}, {}) == {}
    assert sharp.environment({"SLURM_NETWORK": "sharp"}, {}) == {}
