"""Configuration scripts (``start --conf FILE``, ``batch FILE``), as enroot's: a bash file that may
define ``environ()``, ``mounts()``, ``hooks()`` and ``rc()``, and carry ``#HYDRIA_*=`` (or
``#ENROOT_*=``) directive lines.

* directives set settings with precedence over the environment (the command line still wins);
* ``environ()`` prints ``NAME=value`` lines for the container's environment (after environ.d,
  before ``--env``; not substituted);
* ``mounts()`` prints fstab lines, mounted after the image's fstab and mounts.d, before ``--mount``;
* ``hooks()`` runs after the hooks.d scripts, with the same environment (``HYDRIA_ROOTFS``, ...);
* the body of ``rc()`` replaces the image's ``/etc/rc`` (``--rc`` wins over it).

The script is sourced once, in bash, in the container's namespaces before it switches root, after
the hooks.d scripts; its functions run there in the order environ, mounts, hooks, with the hooks'
environment. Unlike enroot, whose environ() runs before the hooks.d scripts, environ() here sees
what those scripts did.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Mapping
from pathlib import Path

from hydria.errors import HydriaError, InvalidArgument
from hydria.log import Logger
from hydria.paths import check_input_file
from hydria.record import Record

log = Logger(__name__)

_DIRECTIVE = re.compile(r"#(?:HYDRIA|ENROOT)_([A-Z][A-Z0-9_]*)=(.*)")
# Sources the script once, then prints environ(), a separator, mounts(), a separator and rc() as
# ``declare -f`` shows it, running hooks() (its output discarded) before rc.
_RUNNER = """source "$1" >/dev/null || exit
if declare -F environ >/dev/null; then environ || exit; fi
printf '\\n%s\\n' "$2"
if declare -F mounts >/dev/null; then mounts || exit; fi
printf '\\n%s\\n' "$2"
if declare -F hooks >/dev/null; then hooks >/dev/null || exit; fi
if declare -F rc >/dev/null; then declare -f rc; fi
"""


class ConfOutput(Record):
    environ: str
    mounts: str
    rc: str | None  # the body of rc(), as a script


class ConfScript(Record):
    path: Path
    directives: dict[str, str]  # setting name without prefix -> value

    def run(self, env: Mapping[str, str]) -> ConfOutput:
        """Source the script and run its functions with ``env`` (the hooks' environment).
        Raises HydriaError when sourcing it or one of its functions fails."""
        separator = f"--hydria-{secrets.token_hex(8)}--"
        result = subprocess.run(["bash", "-c", _RUNNER, "bash", str(self.path), separator], env=dict(env),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, check=False)
        if result.returncode != 0:
            raise HydriaError(f"{self.path} exited with return code {result.returncode}")
        environ, mounts, rc = result.stdout.split(f"\n{separator}\n")
        lines = rc.splitlines()  # "rc () ", "{", body..., "}"
        return ConfOutput(environ, mounts, "\n".join(lines[2:-1]) + "\n" if len(lines) >= 3 else None)


def load(path: str, argument: str = "--conf") -> ConfScript:
    """Check a configuration script (given as ``argument``, for messages) and read its directives.
    Raises HydriaError for a missing file or a syntax error (bash's messages are shown as warnings
    first)."""
    check_input_file(path, argument)
    script = Path(path)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        for line in check.stderr.splitlines():
            log.warning("%s", line)
        raise InvalidArgument(path)
    directives = {}
    for line in script.read_text(errors="replace").splitlines():
        match = _DIRECTIVE.fullmatch(line.strip())
        if match:
            directives[match.group(1)] = match.group(2)
    return ConfScript(script.absolute(), directives)
