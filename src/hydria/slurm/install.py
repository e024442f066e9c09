"""``hydria slurm install-plugin``: compile the shim against this cluster's ``slurm/spank.h``, with
the declarations generated from the Python ones (slurm/generated.py), and write the
plugstack.conf.d snippet that loads it."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydria.errors import HydriaError, NotFound
from hydria.slurm.generated import HEADER, header
from hydria.slurm.plugin_config import parse_plugin_config
from hydria.tools import run_tool

SOURCE = Path(__file__).parent / "plugin" / "spank_hydria.c"


def install_plugin(plugin_dir: Path, plugstack_dir: Path, include_dir: Path, arguments: Sequence[str],
                   hydria: str | None = None) -> Path:
    """Build ``spank_hydria.so`` into ``plugin_dir`` and write ``plugstack_dir/hydria.conf``.
    Raises HydriaError for a missing header, a compiler error or a bad plugstack argument."""
    parse_plugin_config(arguments)
    if not (include_dir / "slurm" / "spank.h").is_file():
        raise NotFound(include_dir / "slurm" / "spank.h",
                       hint="install Slurm's development headers (Debian: libslurm-dev) or pass --include")
    plugin_dir.mkdir(parents=True, exist_ok=True)
    plugin = plugin_dir / "spank_hydria.so"
    staging = plugin_dir / ".spank_hydria.so.new"
    try:
        with tempfile.TemporaryDirectory(prefix="hydria-plugin-") as generated:
            Path(generated, HEADER).write_text(header())
            run_tool(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", f"-I{generated}", f"-I{include_dir}",
                      "-o", str(staging), str(SOURCE)], f"cannot compile {SOURCE}",
                     hint="install gcc (Debian: build-essential)")
    except HydriaError:  # the compiler failed, or there is none
        staging.unlink(missing_ok=True)
        raise
    staging.rename(plugin)  # atomic: a running slurmd keeps the old file
    program = hydria or str(Path(sys.executable).parent / "hydria")
    plugstack_dir.mkdir(parents=True, exist_ok=True)
    snippet = plugstack_dir / "hydria.conf"
    snippet.write_text(f"required {plugin} hydria={program} {' '.join(arguments)}".rstrip() + "\n")
    return snippet
