"""Slurm: the plugin's installation on this node, and ``--cluster``'s step over every node."""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hydria.doctor.host import kernel_version
from hydria.doctor.report import Check, ClusterReport, NodeReport
from hydria.errors import HydriaError, MissingTool
from hydria.paths import hydria_command

OVERLAY_OVER_IDMAPPED = (5, 19)  # an overlay stacks an idmapped mount (the plugin's store_trees)


def cluster_report(srun_arguments: Sequence[str], image: str | None = None) -> ClusterReport:
    """The node checks on one task per node of a Slurm step (``srun --ntasks-per-node=1 ARGS``),
    and with an image, a step in that image through the plugin on the same nodes."""
    if shutil.which("srun") is None:
        raise MissingTool("srun",
                          hint="--cluster runs a Slurm step; run it where Slurm's clients are")
    # --label: each line says which task wrote it (srun interleaves tasks' output by lines, and
    # splits lines longer than its buffer: the JSON comes indented, in short lines)
    command = ["srun", "--label", "--ntasks-per-node=1", *srun_arguments, *hydria_command(), "doctor", "--json",
               *(("--image", image) if image else ())]
    result = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    outputs: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        task, _, text = line.partition(": ")
        outputs.setdefault(task.strip(), []).append(text)
    nodes = [NodeReport.from_json(json.loads("\n".join(text))) for text in outputs.values() if text[:1] == ["{"]]
    if not nodes:
        raise HydriaError(f"the doctor step failed: {result.stderr.strip() or 'no output'}",
                          hint=f"run it by hand to see why: {' '.join(command)}")
    nodes.sort(key=lambda n: n.node)
    if not image:
        return ClusterReport(nodes)
    step = subprocess.run(["srun", "--ntasks-per-node=1", *srun_arguments, f"--container-image={image}",
                           "sh", "-c", "hostname"], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    return ClusterReport(nodes, step.returncode == 0, step.stderr.strip()[-2000:],
                         tuple(sorted(step.stdout.split())), image)


def check_slurm_plugin() -> Check:
    name = "slurm plugin"
    if shutil.which("scontrol") is None:
        return Check(name, "skip", "Slurm is not installed here")
    result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=False, timeout=30)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(name, "warn", f"cannot read Slurm's configuration: {last}",
                     "check SLURM_CONF and that slurmctld runs")
    config = dict(line.split("=", 1) for line in result.stdout.splitlines() if " = " in line)
    plugstack = next((v.strip() for k, v in config.items() if k.strip() == "PlugStackConfig"),
                     "/etc/slurm/plugstack.conf")
    for line in _plugstack_lines(Path(plugstack)):
        fields = line.split()
        if len(fields) >= 2 and fields[1].endswith("spank_hydria.so"):
            plugin = Path(fields[1])
            program = next((f.split("=", 1)[1] for f in fields[2:] if f.startswith("hydria=")), None)
            if not plugin.is_file():
                return Check(name, "fail", f"{plugin} is listed in the plugstack but missing",
                             "as root: hydria slurm install-plugin")
            if program and not os.access(program, os.X_OK):
                return Check(name, "fail", f"the plugin runs {program}, which is missing",
                             "as root: hydria slurm install-plugin (it records this hydria's path)")
            return check_store_trees(fields, Check(name, "ok", f"{plugin} ({fields[0]}) in {plugstack}"))
    return Check(name, "warn", f"hydria's plugin is not in {plugstack}",
                 "as root: hydria slurm install-plugin, and include its snippet in plugstack.conf")


def check_store_trees(fields: Sequence[str], found: Check) -> Check:
    """The plugin's check, with what its ``store_trees`` argument gives on this node's kernel
    (docs/slurm.md, "Kept once per node: the store's images")."""
    trees = next((field.split("=", 1)[1] for field in fields[2:] if field.startswith("store_trees=")), None)
    if not trees:
        return found
    if kernel_version() < OVERLAY_OVER_IDMAPPED:
        return found._replace(status="warn", detail=f"{found.detail}; store_trees={trees} needs Linux 5.19 or newer "
                              f"(this is {platform.release()}): each user keeps their own trees of the store's images",
                              fix="a newer kernel, or remove store_trees from the plugstack line")
    return found._replace(detail=f"{found.detail}; the store's images are kept once per node in {trees}")


def _plugstack_lines(path: Path, depth: int = 0) -> list[str]:
    try:
        text = path.read_text()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include ") and depth < 4:
            for included in sorted(glob.glob(line.split(None, 1)[1].strip())):
                lines += _plugstack_lines(Path(included), depth + 1)
        elif line:
            lines.append(line)
    return lines
