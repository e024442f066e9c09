"""The ``hooks.d/*.sh`` scripts of the system and the user, and a configuration script's ``hooks()``,
with enroot's contract (the built-in hooks are this folder's other modules).

A hook script runs before the container switches root, inside its namespaces, with the
capabilities of its user namespace (as enroot's hooks do, to mount), the caller's environment,
every setting as ``HYDRIA_*`` (switches ``y``/``n``) and ``ENROOT_*`` (as enroot hands them: a
switch that is off is unset), and ``HYDRIA_PID``, ``HYDRIA_ROOTFS``, ``HYDRIA_ENVIRON``,
``HYDRIA_MOUNTS`` (and their ``ENROOT_*`` twins). ``enroot-mount`` is first on its ``PATH``
(cli/enroot_mount.py). As with enroot, the environment file holds the container's environment as
it stands before the hooks (the image's ``/etc/environment``, ``environ.d``, ``--env``), so that a
hook can act on what the job asked for (``grep -q '^MY_FEATURE=1$' "$ENROOT_ENVIRON"``), change a
line (``sed -i 's|^PATH=|PATH=/site/bin:|'``) or delete one; it may append ``NAME=value`` lines
to it and fstab lines to the mounts file. What the hooks changed, added and deleted becomes one
record of edits (runtime/edits.py). A hook's stdout is discarded, its stderr shown, and a non-zero
exit aborts the start. A script without ``#!`` runs with bash, as enroot's ``runparts`` runs it.
"""

from __future__ import annotations

import errno
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
    from collections.abc import Mapping

    from hydria.runtime.confscript import ConfOutput, ConfScript

# enroot's own hooks (standard and optional) and mount files, which hydria's built-in hooks and
# system fstab replace (docs/migration.md): a folder kept from enroot may still hold them, and
# running them too would do it twice, or undo hydria's choices (/tmp 1777, --net's own /sys).
ENROOT_OWN = {
    "hooks.d": frozenset({"10-aptfix.sh", "10-cgroups.sh", "10-devices.sh", "10-home.sh", "10-localtime.sh",
                          "10-shadow.sh", "98-nvidia.sh", "99-mellanox.sh", "50-mig-config.sh", "50-sharp.sh",
                          "50-slurm-pmi.sh", "50-slurm-pytorch.sh"}),
    "mounts.d": frozenset({"10-system.fstab", "20-config.fstab"}),
}


def is_enroot_own(path: str) -> bool:
    """Whether ``path`` (``FOLDER/hooks.d/NAME`` or ``FOLDER/mounts.d/NAME``) is one of enroot's own."""
    return os.path.basename(path) in ENROOT_OWN.get(os.path.basename(os.path.dirname(path)), frozenset())


def enroot_own_files(settings: Settings) -> list[str]:
    """enroot's own hooks and mount files in the system's and the user's folders, left out."""
    return [path for folder in (settings.sysconf_path, settings.config_path)
            for kind, suffix in (("hooks.d", ".sh"), ("mounts.d", ".fstab"))
            for path in listed(os.path.join(folder, kind), suffix) if is_enroot_own(path) and os.path.isfile(path)]


class HookFailed(HydriaError):
    pass


class HookOutput(Record):
    edits: Edits  # what the scripts did to the environment file, and the fstab lines they appended
    conf: ConfOutput | None = None


def run_hooks(settings: Settings, root: str, area: str, conf: ConfScript | None = None,
              environment: Mapping[str, str] | None = None) -> HookOutput:
    """Run the executable ``*.sh`` of the system, then the user's ``hooks.d``, then the
    configuration script (its ``hooks()``; what its other functions print is returned), with
    ``environment`` (the container's, before the hooks) in the environment file.
    Raises HookFailed, or HydriaError for a failing configuration script."""
    scripts = [p for folder in (settings.sysconf_path, settings.config_path)
               for p in listed(os.path.join(folder, "hooks.d"), ".sh") if os.path.isfile(p) and os.access(p, os.X_OK)]
    scripts = [p for p in scripts if not is_enroot_own(p)]  # start.py says so
    if not scripts and conf is None:
        return HookOutput(Edits())
    environ_file, mounts_file = hook_files(area)
    written = environment_text(environment or {})
    with open(environ_file, "w", encoding="utf-8", errors="surrogateescape") as handle:  # bytes as they are
        handle.write(written)
    open(mounts_file, "w").close()
    env = hook_environment(settings, root, area)
    _write_mount_program(f"{area}/bin")
    with sc.AmbientCapabilities("hooks"):
        for script in scripts:
            returncode = _run_script(str(script), env)
            if returncode != 0:
                raise HookFailed(f"{script} exited with return code {returncode}")
        conf_output = conf.run(env) if conf is not None else None
    substitution = dict(os.environ, HYDRIA_ROOTFS=root, ENROOT_ROOTFS=root)
    return HookOutput(Edits(_changes(written, read_text(environ_file)),
                            tuple(fstab.parse(read_text(mounts_file), "hooks", substitution))), conf_output)


def _run_script(script: str, env: dict[str, str]) -> int:
    """Run a hook script; its exit status. One the kernel cannot execute (no ``#!`` line) runs
    with bash, as enroot's ``runparts`` (a bash function) runs it."""
    import shutil
    import subprocess  # here: a start with no hook scripts spares its import

    def run(argv: list[str]) -> int:
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=False).returncode

    try:
        return run([script])
    except OSError as e:
        if e.errno != errno.ENOEXEC:
            raise
    return run([shutil.which("bash", path=env.get("PATH")) or "/bin/sh", script])


def environment_text(environment: Mapping[str, str]) -> str:
    """``environment`` as ``NAME=value`` lines, leaving out a value that a line cannot hold (one
    with a line break, or another character that ends a line for ``str.splitlines``)."""
    return "".join(f"{name}={value}\n" for name, value in environment.items() if value.splitlines() in ([], [value]))


def _changes(written: str, text: str) -> tuple[tuple[str, str | None], ...]:
    """What the hooks did to the environment file that held ``written`` and now holds ``text``:
    each variable they added or changed, in the file's order, and each they deleted (None)."""
    before = dict(parse_env_lines(written))
    after = dict(parse_env_lines(text))  # a name's last line wins
    return (*((name, value) for name, value in after.items() if before.get(name) != value),
            *((name, None) for name in before if name not in after))


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
