"""Where a build step runs: a user namespace in which the build is root (one ID mapped: the
user's, as ``hydria start --root``), the stage's layers as the lower folders of the kernel's
overlay, and an upper folder of the step's own that collects what it changes (build/layers.py).

A step runs in a forked child, which mounts and then either does a Python action on the root
(``COPY``, ``ADD``, ``WORKDIR``) or runs a command (``RUN``) in a grandchild that pivots into the
root. ``RUN`` gets the host's ``/proc``, ``/sys``, ``/dev``, ``/etc/hosts`` and ``/etc/resolv.conf``
(and its ``--mount``s); the child removes them again, and the mount points it had to create,
before the upper folder becomes a layer, so that none of them ends up in the image.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from hydria import locks
from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.imagebuild import copying
from hydria.imagebuild.idmap import IdMap
from hydria.log import Logger
from hydria.record import Record
from hydria.runtime import fstab, namespaces, rootfs, seccomp
from hydria.runtime import syscalls as sc
from hydria.runtime.mounts import MountFailed, mount_entries, resolve_in_root

log = Logger(__name__)

RUN_FSTAB = """\
/proc /proc none x-create=dir,rbind,rw,rslave 0 0
/sys /sys none x-create=dir,rbind,ro,rslave 0 0
/dev /dev none x-create=dir,rbind,rw,nosuid,noexec,rslave 0 0
/etc/hosts /etc/hosts none x-create=file,bind,ro,nosuid,nodev,private 0 0
/etc/resolv.conf /etc/resolv.conf none x-create=file,bind,ro,nosuid,nodev,private,nofail,silent 0 0
"""
# apt drops to its _apt user to download, which one mapped ID cannot be (as the identity hook, hooks/identity.py)
APT_AS_ROOT = 'APT::Sandbox::User "root";\n'
APT_CONF = "/etc/apt/apt.conf.d/zz-hydria-build"
FAILED = 125  # the child's exit status when hydria itself failed (its error is in the work folder)


class StepRoot(Record):
    """The folders of one step: ``lowers`` top first (layer trees; the base image's squashfs
    images, the lowest first, are mounted below them), ``upper`` and ``work`` for the overlay,
    ``scratch`` for mount points."""

    lowers: tuple[str, ...]
    base_images: tuple[str, ...]
    upper: str
    work: str
    scratch: str
    idmap: IdMap | None = None  # the full mapping of the user's subordinate IDs; None: one ID


class RunMount(Record):
    """A ``RUN --mount``: ``kind`` "bind", "cache", "tmpfs" or "secret" (a file bound read-only);
    ``source`` a host path."""

    kind: str
    target: str
    source: str | None = None
    writable: bool = False
    sharing: str = "shared"  # a cache's: "shared", "locked" (one step at a time) or "private" (else a new folder)
    options: tuple[str, ...] = ()  # a tmpfs's (size=...); a secret's id, mode and variable (its cache key)


class Command(Record):
    argv: tuple[str, ...]
    environment: Mapping[str, str]
    workdir: str
    network: bool = True
    mounts: tuple[RunMount, ...] = ()
    user: str = ""  # USER, honoured where the step maps the subordinate IDs (else root)
    home_from_user: bool = False  # HOME is USER's home in the image's /etc/passwd (the image's ENV sets none)


def _settings_for_build(settings: Settings) -> Settings:
    return settings._replace(remap_root=True, unshare_net=False, unshare_ipc=False, unshare_uts=False,
                             unshare_pid=False)


Action = Callable[[str, StepRoot], int]  # does a step in its mounted root; the exit status


def in_step(step: StepRoot, settings: Settings, action: Action) -> int:
    """Run ``action(root, step)`` in a child that has mounted the step's root; its exit status.
    Raises the HydriaError the child raised."""
    error_file = os.path.join(step.scratch, "error.json")
    child = step.idmap.fork() if step.idmap is not None else os.fork()
    if child == 0:
        status = FAILED
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the step; this one cleans up
            sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)  # hydria killed: the step goes with it
            root = _mount_step(step, settings)
            status = action(root, step)
        except HydriaError as e:
            with open(error_file, "w") as handle:
                json.dump({"message": str(e), "hint": e.hint}, handle)
        except OSError as e:  # a file system error no check anticipated: one line, not a traceback
            with open(error_file, "w") as handle:
                json.dump({"message": f"build step failed: {e.strerror}: {e.filename}", "hint": None}, handle)
        except BaseException as e:  # noqa: BLE001  a child must never return into the parent's code
            with open(error_file, "w") as handle:
                json.dump({"message": f"build step failed: {e!r}", "hint": None}, handle)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    try:
        status = _wait(child)
    except BaseException:  # Ctrl-C, SIGTERM: the step stops with hydria
        _stop(child)
        raise
    if status == FAILED and os.path.exists(error_file):
        with open(error_file) as handle:
            error = json.load(handle)
        os.unlink(error_file)
        raise HydriaError(error["message"], hint=error["hint"])
    return status


def _wait(child: int) -> int:
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if status & 0x7F == 0 else 128 + (status & 0x7F)


def _stop(child: int) -> None:
    """End ``child`` and wait for it, whatever signals come meanwhile."""
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        return
    while True:
        try:
            os.waitpid(child, 0)
            return
        except ChildProcessError:
            return
        except KeyboardInterrupt:
            continue


def _mount_step(step: StepRoot, settings: Settings) -> str:
    if step.idmap is None:  # else the namespace is made already (IdMap.fork)
        namespaces.enter(_settings_for_build(settings), os.getuid(), os.getgid())
    sc.prctl(sc.PR_SET_DUMPABLE, 0)  # its /proc/PID/root (the host's) stays closed to the step's programs
    return mount_layers(step.lowers, step.base_images, step.scratch, "root", settings, (step.upper, step.work),
                        owners=step.idmap is not None)


OVERLAY_MAX_LAYERS = 500  # the kernel's overlay stacks at most this many lower folders (OVL_MAX_STACK)


def mount_layers(lowers: Sequence[str], base_images: Sequence[str], scratch: str, name: str, settings: Settings,
                 writable: tuple[str, str] | None = None, owners: bool = False) -> str:
    """Mount layer folders (top first) over a base image's squashfs images (the lowest first) at
    ``scratch/name``, with an upper and work folder (``writable``), or read-only (``COPY --from``
    a stage); its path. ``owners``: the base image's files keep their owners (a full mapping),
    else every one belongs to root."""
    folders = list(lowers)
    if base_images:
        base = os.path.join(scratch, f"{name}.base")
        os.makedirs(base, exist_ok=True)
        folders.extend(rootfs.mount_images(list(base_images), base, 0, 0, settings.fast_reader, keep_owners=owners))
    if not folders:
        empty = os.path.join(scratch, f"{name}.empty")
        os.makedirs(empty, exist_ok=True)
        folders.append(empty)
    if writable is None and len(folders) == 1:
        return folders[0]  # read only by hydria's copy: no overlay needed
    if len(folders) > OVERLAY_MAX_LAYERS:
        raise HydriaError(f"this step stands on {len(folders)} layers (the base image's and the steps' before it), "
                          f"more than the {OVERLAY_MAX_LAYERS} that the kernel's overlay stacks",
                          hint="join RUN steps with && (or COPY what several steps copy at once), or build a base "
                               "image from the first part of the Dockerfile and FROM it")
    # Short names for the lower folders (the mount's options are limited to a page).
    links = os.path.join(scratch, f"{name}.lower")
    os.makedirs(links, exist_ok=True)
    for number, folder in enumerate(folders):
        os.symlink(folder, os.path.join(links, str(number)))
    target = os.path.join(scratch, name)
    os.makedirs(target, exist_ok=True)
    options = f"lowerdir={':'.join(str(n) for n in range(len(folders)))},userxattr,xino=off"
    if writable is not None:
        # volatile: the step's own syncs (dpkg's, for every file it unpacks) do not wait for the
        # disk, as in podman's builds. An upper folder is never mounted again, and the build
        # cache syncs none of its files either: after a machine's crash, build with --no-cache.
        options += f",upperdir={writable[0]},workdir={writable[1]},volatile"
    os.chdir(links)
    try:
        sc.mount("overlay", target, "overlay", sc.MS_NOSUID | sc.MS_NODEV | (0 if writable else sc.MS_RDONLY), options)
    except OSError as e:
        raise HydriaError(f"cannot mount the build's overlay: {e.strerror}",
                          hint="builds need the kernel's overlay in user namespaces (Linux 5.11 or newer) "
                               "and HYDRIA_CACHE_PATH on a local disk (not NFS)") from None
    finally:
        os.chdir("/")
    return target


def run_command(command: Command) -> Action:
    """The action that runs ``command`` in the step's root and removes its mounts afterwards (and
    the folders the overlay copied up to its upper folder for their mount points)."""

    def action(root: str, step: StepRoot) -> int:
        created: list[str] = []
        held: list[int] = []  # the cache folders' locks, until the step ends
        targets = _mount_for_run(root, command, step.scratch, created, held, step.idmap is None)
        user, run = None, command
        if command.user and step.idmap is not None:
            user = copying.owner_of(root, command.user, "USER ")
            home = copying.home_of(root, command.user.partition(":")[0]) if command.home_from_user else None
            if home is not None:  # as Docker's RUN as USER sees it
                run = command._replace(environment={**command.environment, "HOME": home})
        sc.unshare(sc.CLONE_NEWPID)  # the command is PID 1: when it ends, whatever it left running ends too
        child = os.fork()
        if child == 0:
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)
                _exec_in(root, run, user, fake_ids=step.idmap is None)
            except OSError as e:
                log.error("cannot start the step's command: %s", e)
            finally:
                os._exit(127)
        try:
            status = _wait(child)
        except BaseException:
            _stop(child)
            raise
        for target in reversed(targets):
            sc.umount2(target, sc.MNT_DETACH)
        for path in reversed(created):  # deepest first: what was made only to mount on
            try:
                os.rmdir(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            except OSError:
                pass  # the command put something there: it stays, as in Docker
        _drop_copied_up(root, step.upper, [os.path.dirname(path) for path in [*targets, *created]])
        return status

    return action


def _drop_copied_up(root: str, upper: str, folders: list[str]) -> None:
    """Folders that the overlay copied up only because a mount point was made in them: empty in
    the upper folder, not opaque, and still in a lower layer. Removed from the upper folder, the
    lower ones show again, so the layer does not carry them."""
    from hydria.imagebuild.layers import is_opaque

    for folder in sorted(set(folders), key=len, reverse=True):
        while folder.startswith(root + "/"):
            relative = os.path.relpath(folder, root)
            copied = os.path.join(upper, relative)
            try:
                if os.listdir(copied) or is_opaque(copied):
                    break
                os.rmdir(copied)
            except OSError:
                break
            if not os.path.isdir(folder):  # it was no lower layer's: keep it as the command left it
                os.mkdir(copied)
                break
            folder = os.path.dirname(folder)


def _missing_on_the_way(root: str, target: str) -> list[str]:
    """The host paths of ``target`` and its parents that do not exist yet, outermost first."""
    missing = []
    path = target
    while path not in ("", "/"):
        host = resolve_in_root(root, path)
        if os.path.lexists(host):
            break
        missing.append(host)
        path = os.path.dirname(path)
    return list(reversed(missing))


def _mount_for_run(root: str, command: Command, scratch: str, created: list[str], held: list[int],
                   one_id: bool) -> list[str]:
    entries = fstab.parse(RUN_FSTAB, "build mounts")
    if one_id and os.path.isdir(resolve_in_root(root, "/etc/apt/apt.conf.d")):
        conf = os.path.join(scratch, "apt-as-root.conf")
        with open(conf, "w") as handle:
            handle.write(APT_AS_ROOT)
        entries.append(fstab.MountEntry(conf, APT_CONF, "none", ("x-create=file", "bind", "ro")))
    for mount in command.mounts:
        if mount.kind == "tmpfs":
            entries.append(fstab.MountEntry("tmpfs", mount.target, "tmpfs", ("x-create=dir", "mode=1777", *mount.options)))
        else:
            source = _claimed_cache(mount, scratch, held) if mount.kind == "cache" else mount.source or ""
            options = ("x-create=dir" if os.path.isdir(source) else "x-create=file", "rbind",
                       "rw" if mount.writable else "ro")
            entries.append(fstab.MountEntry(source, mount.target, "none", options))
    targets = []
    for entry in entries:
        try:
            missing = _missing_on_the_way(root, entry.target)
        except MountFailed:
            missing = []
        mount_entries([entry], root, 0, "/")
        created += missing
        host = resolve_in_root(root, entry.target)
        if os.path.ismount(host):
            targets.append(host)
    return targets


def _claimed_cache(mount: RunMount, scratch: str, held: list[int]) -> str:
    """The folder of a cache mount, locked as its ``sharing`` says (BuildKit's meanings): shared
    with other steps, or one step at a time, the others waiting ("locked"), or taking a new
    empty folder of the step's own ("private", while another step has the folder)."""
    assert mount.source is not None
    folder = os.open(mount.source, os.O_RDONLY | os.O_DIRECTORY)
    held.append(folder)  # closed when the step's process ends, which releases the lock
    shared = mount.sharing == "shared"
    if locks.acquire(folder, shared=shared, timeout=0):
        return mount.source
    if mount.sharing == "private":
        own = os.path.join(scratch, f"cache.{len(held)}")
        os.mkdir(own, os.stat(mount.source).st_mode & 0o7777)
        return own
    log.info("Waiting for the cache folder of %s (sharing=%s): another build step is using it",
             mount.target, mount.sharing)
    locks.acquire(folder, shared=shared)
    return mount.source


def _exec_in(root: str, command: Command, user: copying.Owner | None, fake_ids: bool) -> None:
    """In the grandchild, PID 1 of its PID namespace: a mount namespace of its own, pivot into
    ``root``, a ``/proc`` of the namespace, then the command: as ``user`` where given, and with
    one ID mapped (``fake_ids``) under the seccomp filter that lets package managers chown."""
    sc.unshare(sc.CLONE_NEWNS | (0 if command.network else sc.CLONE_NEWNET))
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount2(".", sc.MNT_DETACH)
    os.chdir("/")
    # over the host's (the kernel lets a namespace mount a /proc only where one is fully visible)
    sc.mount("proc", "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    try:
        os.chdir(command.workdir)
    except OSError as e:
        log.error("cannot enter the working directory %s: %s", command.workdir, e.strerror)
        os._exit(FAILED - 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if user is not None:
        os.setgroups([user.gid])
        os.setresgid(user.gid, user.gid, user.gid)
        os.setresuid(user.uid, user.uid, user.uid)
    if fake_ids:
        sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
    try:
        os.execvpe(command.argv[0], list(command.argv), dict(command.environment))
    except OSError as e:
        log.error("cannot run %s: %s", command.argv[0], e.strerror)
        os._exit(127)
