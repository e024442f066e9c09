"""What a start imports (docs/runtime.md, start latency): none of the standard modules whose
imports cost a start several milliseconds each."""

from __future__ import annotations

import subprocess
import sys

HEAVY = {"typing", "re", "pathlib", "enum", "signal", "shlex", "subprocess", "shutil", "tempfile", "logging",
         "dataclasses", "argparse", "socket", "json", "threading",
         "collections", "contextlib", "functools"}  # the last three: about 5 ms with Record's namedtuples


def test_the_start_path_imports_no_heavy_module() -> None:
    program = ("import sys\n"
               "import hydria.cli.main, hydria.cli.quickstart, hydria.cli.start, hydria.container.options,\\\n"
               "    hydria.container.target, hydria.container.start, hydria.container.named, hydria.container.running,\\\n"
               "    hydria.hooks.scripts, hydria.hooks.identity, hydria.hooks.localtime, hydria.slurm.step, hydria.cli.slurm\n"
               f"print(' '.join(sorted(set(sys.modules) & {HEAVY!r})))\n")
    found = subprocess.run([sys.executable, "-S", "-c", program], capture_output=True, text=True, check=True,
                           env={"PYTHONPATH": ":".join(p for p in sys.path if p)})
    assert found.stdout.strip() == ""
