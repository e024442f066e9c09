"""Hooks: the built-in ones, in-process, and ``hooks.d/*.sh`` scripts with enroot's contract.

A hook script runs before the container switches root, inside its namespaces, with the
capabilities of its user namespace (as enroot's hooks do, to mount), the caller's environment,
every setting as ``HYDRIA_*`` (switches ``y``/``n``) and ``ENROOT_*`` (as enroot hands them: a
switch that is off is unset), and ``HYDRIA_PID``, ``HYDRIA_ROOTFS``, ``HYDRIA_ENVIRON``,
``HYDRIA_MOUNTS`` (and their ``ENROOT_*`` twins). ``enroot-mount`` is first on its ``PATH``
(cli/enroot_mount.py). It may append ``NAME=value`` lines to the environment file and fstab lines
to the mounts file; its stdout is discarded, its stderr shown, and a non-zero exit aborts the start.
"""

from __future__ import annotations

import grp
import os
import pwd
import sys

from hydria import __version__
from hydria.config import PREFIX, SPECS, Settings
from hydria.errors import HydriaError
from hydria.log import Logger
from hydria.paths import listed, read_text
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import syscalls as sc
from hydria.runtime.mounts import resolve_in_root

if TYPE_CHECKING:
    from hydria.runtime.confscript import ConfOutput, ConfScript

log = Logger(__name__)


class HookFailed(HydriaError):
    pass


class HookOutput(Record):
    environ: str
    mounts: str
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
        try:
            sc.raise_ambient_capabilities()
        except OSError as e:  # a kernel before 4.3: the hooks run, but cannot mount
            log.warning("hooks run without capabilities (%s): their mounts will fail", e.strerror)
        try:
            for script in scripts:
                result = subprocess.run([str(script)], env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, check=False)
                if result.returncode != 0:
                    raise HookFailed(f"{script} exited with return code {result.returncode}")
            if conf is not None:
                conf_output = conf.run(env)
        finally:
            sc.clear_ambient_capabilities()
    return HookOutput(read_text(environ_file), read_text(mounts_file), conf_output)


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
        enroot_name = "ENROOT_" + name.removeprefix(PREFIX)
        if name.removeprefix(PREFIX) in switches and value == "n":
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


def write_identity(root: str, user: pwd.struct_passwd, remap_root: bool) -> None:
    """Put root and the caller in the container's passwd and group files, first, so that ``id``,
    ``whoami`` and ``~`` work (the built-in equivalent of enroot's 10-shadow hook)."""
    etc = os.path.join(root, "etc")
    if not os.path.isdir(etc):
        return
    shell = _shell(root)
    entries = [f"root:x:0:0:root:/root:{shell}"]
    groups = ["root:x:0:"]
    if not remap_root:
        entries.append(f"{user.pw_name}:x:{user.pw_uid}:{user.pw_gid}:{user.pw_gecos}:{user.pw_dir}:{shell}")
        groups.append(f"{_group_name(user.pw_gid)}:x:{user.pw_gid}:")
    for name, new in (("passwd", entries), ("group", groups)):
        path = os.path.join(etc, name)
        try:
            old = read_text(path).splitlines() if os.path.exists(path) else []
            taken = {line.split(":")[0] for line in new} | {line.split(":")[2] for line in new}
            kept = [line for line in old if line.count(":") >= 2 and
                    line.split(":")[0] not in taken and line.split(":")[2] not in taken]
            with open(path, "w") as handle:
                handle.write("\n".join([*new, *kept]) + "\n")
        except OSError:
            continue  # a read-only unpacked root: leave it as it is


def apt_as_root(root: str, remap_root: bool) -> None:
    """Under ``--root`` on a Debian-family image, apt fetches as root instead of as its ``_apt``
    sandbox user, which a user namespace of one uid cannot switch to (enroot's 10-aptfix hook)."""
    if not remap_root or not os.path.isfile(os.path.join(root, "etc", "debian_version")):
        return
    try:
        conf_dir = resolve_in_root(root, "/etc/apt/apt.conf.d")
        os.makedirs(conf_dir, exist_ok=True)
        with open(os.path.join(conf_dir, "hydria"), "w") as handle:
            handle.write('APT::Sandbox::User "root";\n')
    except (OSError, HydriaError):
        return  # a read-only unpacked root: leave it as it is


def copy_localtime(root: str, host_localtime: str = "/etc/localtime") -> None:
    """The host's time zone (the built-in equivalent of enroot's 10-localtime hook): when the host's
    /etc/localtime is a symlink, the link and the zone file it names are copied into the root
    filesystem at the same paths. Copied, not bound, so that the image can still install tzdata."""
    try:
        link = os.readlink(host_localtime)
    except OSError:
        return  # not a symlink (or none): the image keeps its own
    zone = os.path.realpath(host_localtime)
    named = os.path.normpath(os.path.join("/etc", link))  # where the link leads from /etc/localtime
    if not os.path.isfile(zone) or not os.path.isdir(os.path.join(root, "etc")):
        return
    try:
        inside = resolve_in_root(root, named)
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        with open(zone, "rb") as source, open(inside, "wb") as copy:  # a few KB: no shutil import
            copy.write(source.read())
        localtime = os.path.join(resolve_in_root(root, "/etc"), "localtime")
        if os.path.lexists(localtime):
            os.unlink(localtime)
        os.symlink(link, localtime)
    except (OSError, HydriaError):
        return  # a read-only unpacked root, or a zone path the image makes odd: keep the image's


def _shell(root: str) -> str:
    return "/bin/bash" if os.path.exists(os.path.join(root, "bin/bash")) else "/bin/sh"



def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def login_environment(environment: dict[str, str], root: str, uid: int, user: pwd.struct_passwd) -> None:
    """Login variables that the image and the options left unset (enroot's login emulation)."""
    home = "/root" if uid == 0 else user.pw_dir
    environment.setdefault("HOME", home)
    environment.setdefault("USER", "root" if uid == 0 else user.pw_name)
    environment.setdefault("LOGNAME", user.pw_name)
    environment.setdefault("SHELL", _shell(root))
    environment.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" if uid == 0
                           else "/usr/local/bin:/usr/bin:/bin")
    environment.setdefault("TERM", "dumb")
