"""The ``hooks.d/*.sh`` scripts of the system and the user, and a configuration script's ``hooks()``,
with enroot's contract (the built-in hooks are this folder's other modules).

A hook script runs before the container switches root, inside its namespaces, with the
capabilities of its user namespace (as enroot's hooks do, to mount), the caller's environment,
every setting as ``HYDRIA_*`` (switches ``y``/``n``) and ``ENROOT_*`` (as enroot hands them: a
switch that is off is unset), and ``HYDRIA_PID``, ``HYDRIA_ROOTFS``, ``HYDRIA_ENVIRON``,
``HYDRIA_MOUNTS`` (and their ``ENROOT_*`` twins). ``enroot-mount`` is first on its ``PATH``
(cli/enroot_mount.py). It may append ``NAME=value`` lines to the environment file and fstab lines
to the mounts file (what they append becomes one record of edits, runtime/edits.py); its stdout is
discarded, its stderr shown, and a non-zero exit aborts the start.
"""

from __future__ import annotations

import os
import sys

from hydria.config import HYDRIA_PREFIX, SPECS, Settings
from hydria.errors import HydriaError
from hydria.paths import listed, read_text
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import fstab
from hydria.runtime import syscalls as sc
from hydria.runtime.edits import Edits
from hydria.runtime.environ import parse_env_lines
from hydria.version import __version__

if TYPE_CHECKING:
    from hydria.runtime.confscript import ConfOutput, ConfScript



class HookFailed(HydriaError):
    pass


class HookOutput(Record):
    edits: Edits  # the variables and the fstab lines the scripts appended
    conf: ConfOutput | None = None


def run_hooks(settings: Settings, root: str, area: str, conf: ConfScript | None = None) -> HookOutput:
    """Run the executable ``*.sh`` of the system, then the user's ``hooks.d``, then the
    configuration script (its ``hooks()``; what its other functions print is returned).
    Raises HookFailed, or HydriaError for a failing configuration script."""
    environ_file, mounts_file = hook_files(area)
    for path in (environ_file, mounts_file):
        open(path, "a").close()
    scripts = [p for folder in (settings.sysconf_path, settings.config_path)
               for p in listed(os.path.join(folder, "hooks.d"), ".sh") if os.path.isfile(p) and os.access(p, os.X_OK)]
    conf_output = None
    if scripts or conf is not None:
        import subprocess  # here: a start with no hook scripts spares its import

        env = hook_environment(settings, root, area)
        _write_mount_program(f"{area}/bin")
        with sc.ambient_capabilities("hooks"):
            for script in scripts:
                result = subprocess.run([str(script)], env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, check=False)
                if result.returncode != 0:
                    raise HookFailed(f"{script} exited with return code {result.returncode}")
            if conf is not None:
                conf_output = conf.run(env)
    substitution = dict(os.environ, HYDRIA_ROOTFS=root, ENROOT_ROOTFS=root)
    return HookOutput(Edits(tuple(parse_env_lines(read_text(environ_file))),
                            tuple(fstab.parse(read_text(mounts_file), "hooks", substitution))), conf_output)


def hook_files(area: str) -> tuple[str, str]:
    """The environment and mounts files hooks append to."""
    return f"{area}/environment", f"{area}/fstab"


def hook_environment(settings: Settings, root: str, area: str) -> dict[str, str]:
    """The caller's environment, every setting as HYDRIA_* and ENROOT_* (a switch that is off
    unset, as enroot does: hooks test ``[ -n "${ENROOT_REMAP_ROOT-}" ]``), the hook contract,
    and ``enroot-mount`` first on ``PATH``."""
    environ_file, mounts_file = hook_files(area)
    contract = {"PID": str(os.getpid()), "ROOTFS": root, "ENVIRON": environ_file,
                "MOUNTS": mounts_file, "VERSION": __version__}
    env = dict(os.environ)
    env.update(settings.environment)
    switches = {spec.name for spec in SPECS if spec.kind == "bool"}
    for name, value in settings.as_variables().items():
        env[name] = value
        enroot_name = "ENROOT_" + name.removeprefix(HYDRIA_PREFIX)
        if name.removeprefix(HYDRIA_PREFIX) in switches and value == "n":
            env.pop(enroot_name, None)
        else:
            env[enroot_name] = value
    for key, value in contract.items():
        env["HYDRIA_" + key] = env["ENROOT_" + key] = value
    env["PATH"] = f"{area}/bin" + (":" + env["PATH"] if env.get("PATH") else ":/usr/local/bin:/usr/bin:/bin")
    return env


def _write_mount_program(folder: str) -> None:
    """``FOLDER/enroot-mount``: this Python, isolated from the hooks' PYTHONPATH, running
    cli/enroot_mount.py from this installation."""
    installation = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "enroot-mount")
    with open(path, "w") as handle:
        handle.write(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {installation!r})\n"
                     "from hydria.cli.enroot_mount import main\nsys.exit(main(sys.argv[1:]))\n")
    os.chmod(path, 0o755)
