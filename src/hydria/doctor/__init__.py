"""``hydria doctor``: check that a node (or every node of a Slurm allocation) can run hydria
containers, and say how to fix what cannot.

Each check gives ``ok``, ``warn`` (works, with a limit), ``fail`` (containers will not start, or a
feature is broken) or ``skip`` (not applicable here: no Slurm, no GPU), with a detail and, unless
ok, a fix. The checks run as the calling user, with that user's settings, and change nothing
outside a temporary directory they remove.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from functools import partial

from hydria.config import Settings
from hydria.doctor.cluster import check_slurm_plugin, cluster_report
from hydria.doctor.containers import check_container_start, check_mounts, check_named_containers
from hydria.doctor.devices import check_cdi, check_gpus, check_infiniband
from hydria.doctor.folders import check_configuration, check_setting_path
from hydria.doctor.host import (
    TOOLS,
    check_fuse_device,
    check_kernel,
    check_tool,
    check_user_namespaces,
)
from hydria.doctor.images import (
    check_image_policy,
    check_image_reader,
    check_image_store,
    check_read_cache,
    check_user_cache,
)
from hydria.doctor.report import Check, ClusterReport, NodeReport, render, render_cluster, summary

__all__ = ["Check", "ClusterReport", "NodeReport", "cluster_report", "node_report", "render", "render_cluster",
           "summary"]


def node_report(settings: Settings, image: str | None = None) -> NodeReport:
    """Every node check, in docs/doctor.md's order (host, images, folders, containers, cluster,
    devices: one module each); a check that crashes is reported as failed, not raised."""
    checks: list[Callable[[], Check]] = [
        check_user_namespaces, check_kernel, check_fuse_device, *(partial(check_tool, *tool) for tool in TOOLS),
        partial(check_image_reader, settings), partial(check_read_cache, settings),
        *(partial(check_setting_path, settings, setting) for setting in ("data_path", "runtime_path", "temp_path")),
        partial(check_user_cache, settings), partial(check_image_store, settings), partial(check_image_policy, settings),
        partial(check_configuration, settings),
        partial(check_mounts, settings), partial(check_named_containers, settings),
        partial(check_container_start, settings, image),
        check_slurm_plugin, check_gpus, partial(check_cdi, settings), check_infiniband,
    ]
    results = []
    for check in checks:
        try:
            results.append(check())
        except Exception as e:  # noqa: BLE001 a check must not hide the others
            function = check.func if isinstance(check, partial) else check
            results.append(Check(function.__name__.removeprefix("check_"), "fail", f"the check itself failed: {e}"))
    return NodeReport(platform.node(), results)

