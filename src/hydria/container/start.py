"""Starting a container: the one place that orders the steps.

1. user namespace (one uid and gid mapped: the caller's own, or 0 with ``--root``) and mount
   namespace, plus the ones asked for (``--net``, ``--ipc``, ``--uts``);
2. a private tmpfs on the runtime directory;
3. the root filesystem: image file (squashfuse + overlay on the tmpfs) or named container;
4. passwd/group entries, mounts of pass -1, the hooks.d scripts, the environment, then the edits
   of the built-in hooks and the CDI devices (``--device``) applied in one place
   (runtime/edits.py: mounts, links, loader cache, environment), mounts of pass 0 (image fstab,
   mounts.d, ``--mount``), the devices' createRuntime/createContainer hooks;
5. read-only remount unless writable, pivot_root, a cgroup namespace of its own, the devices'
   startContainer hooks;
6. the seccomp filter (runtime/seccomp.py), then ``exec`` of ``/bin/sh /etc/rc CMD...``: the
   program replaces hydria, so its exit status and signals are the container's, and nothing
   lingers (with ``--pid``, hydria stays as the parent of PID 1 and passes its status on).
"""

from __future__ import annotations

import errno
import os
import pwd
import sys

from hydria.config import Settings
from hydria.container import read_cache
from hydria.errors import HydriaError
from hydria.hooks import cgroups, identity, localtime, scripts, slurm_pmi
from hydria.log import Logger
from hydria.paths import (
    NOT_REGULAR,
    check_input_file,
    ensure_dir,
    listed,
    process_tag,
    read_input,
    read_text,
)
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import edits, environ, fstab, lock, namespaces, rootfs, run_folders, seccomp
from hydria.runtime import syscalls as sc
from hydria.runtime.mounts import link_in_root, mount_entries, read_in_root, resolve_in_root
from hydria.runtime.reader import installed_reader

if TYPE_CHECKING:  # confscript (and the secrets it needs) only for --conf
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

    from hydria.container.store_trees import StoreTrees
    from hydria.hooks.cdi import Registry
    from hydria.runtime.confinement import Confinement
    from hydria.runtime.confscript import ConfScript

log = Logger(__name__)
SYSTEM_FSTAB = """\
/proc /proc none x-create=dir,rbind,rw,rslave 0 -1
/sys /sys none x-create=dir,rbind,ro,rslave 0 -1
/dev /dev none x-create=dir,rbind,rw,nosuid,noexec,rslave 0 -1
tmpfs /tmp tmpfs x-create=dir,rw,nosuid,nodev,mode=1777 0 -1
""" + "".join(f"tmpfs {folder} tmpfs x-create=dir,rw,nosuid,nodev,mode=755 0 -1\n" for folder in run_folders.FOLDERS) + """\
/etc/hosts /etc/hosts none x-create=file,bind,ro,nosuid,nodev,private 0 -1
/etc/hostname /etc/hostname none x-create=file,bind,ro,nosuid,nodev,private,nofail,silent 0 -1
/etc/resolv.conf /etc/resolv.conf none x-create=file,bind,ro,nosuid,nodev,private,nofail,silent 0 -1
/etc/machine-id /etc/machine-id none x-create=file,bind,ro,nosuid,nodev,private,nofail,silent 0 -1
"""
LOCK_FILE = ".lock"  # in a named container's directory (runtime/lock.py)
NET_FSTAB = """none /sys none x-detach,nofail,silent 0 -1
sysfs /sys sysfs x-create=dir,ro,nosuid,nodev,noexec,private 0 -1
"""
# HYDRIA_RESTRICT_DEV or --ipc (enroot's 10-devices hook): a /dev of its own with the harmless
# devices, a new devpts; with --ipc a private /dev/shm and mqueue, else the host's.
DEV_FSTAB = """none /dev none x-detach,nofail,silent 0 -1
tmpfs /dev tmpfs x-create=dir,nosuid,noexec,mode=755 0 -1
""" + "".join(f"/dev/{d} /dev/{d} none x-create=file,bind,rw,nosuid,noexec{',nofail,silent' if d == 'tty' else ''} 0 -1\n"
              for d in ("null", "zero", "full", "random", "urandom", "tty")) + """\
none /dev/pts devpts x-create=dir,newinstance,ptmxmode=0666,mode=620,nosuid,noexec 0 -1
"""
SHARED_IPC_FSTAB = """/dev/shm /dev/shm none x-create=dir,rbind,rw,nosuid,nodev 0 -1
/dev/mqueue /dev/mqueue none x-create=dir,rbind,rw,nosuid,nodev,noexec,nofail,silent 0 -1
"""
PRIVATE_IPC_FSTAB = """tmpfs /dev/shm tmpfs x-create=dir,nosuid,nodev,mode=1777 0 -1
mqueue /dev/mqueue mqueue x-create=dir,nosuid,nodev,noexec,nofail,silent 0 -1
"""
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}


class OciProcess(Record):
    """An OCI bundle's process (hydria oci run): the command is run as it is, found on the
    environment's PATH (no rc, no shell), with ``env`` over the site's environ.d (not the image's
    /etc/environment), in ``cwd``, in a UTS namespace named ``hostname``. Its names are taken as
    they are: a job's environment holds ones a shell cannot set (BASH_FUNC_ml%%)."""

    env: Mapping[str, str]
    cwd: str = "/"
    hostname: str | None = None
    confinement: Confinement | None = None  # its capabilities, masked paths, seccomp profile


class SlurmStep(Record):
    """The Slurm plugin's step container: no built-in Slurm hook (its tasks bring their own
    SLURM_*/PMI variables, and may belong to other steps that join it)."""

    store_trees: StoreTrees | None = None  # the node's trees of the store's images


class StartOptions(Record):
    """``hydria start`` after parsing; settings already carry ``--root``, ``--rw`` and unshares.
    An OCI bundle's process and a Slurm step bring records of their own."""

    target: str  # as the user named it, for messages
    command: Sequence[str]
    env: Sequence[str] = ()
    mounts: Sequence[str] = ()
    rc: str | None = None
    entries: Sequence[fstab.MountEntry] = ()  # mounts made by callers other than the CLI
    conf: ConfScript | None = None  # --conf
    devices: Sequence[str] = ()  # --device: CDI device names (hooks/cdi.py)
    # The command's first word when it is one of hydria start's own options (``hydria start IMAGE
    # --rw ...``): an error, unless the image has an entrypoint to take it (as enroot passes it on).
    misplaced_option: str | None = None
    # ``hydria start`` of an MPI launcher from the command line: the command that starts the same
    # container on another node, for the launcher's daemons (hydria/launch.py).
    remote_start: str | None = None
    oci: OciProcess | None = None
    step: SlurmStep | None = None


def start(container: rootfs.Container, options: StartOptions, settings: Settings) -> None:
    """Start the container and exec its program; returns only by raising HydriaError."""
    env_options = [environ.env_option(e, os.environ) for e in options.env]
    asked = frozenset(name for name, _ in env_options)  # the user's own --env: a request, as the host's
    env_options += (options.oci.env if options.oci else {}).items()
    extra_mounts = [*(fstab.from_mount_option(m) for m in options.mounts), *options.entries]
    if options.rc is not None:
        check_input_file(options.rc, "--rc")
    rc_text = read_input(options.rc) if options.rc else None
    # The CDI specs are read as the host sees them (in the user namespace, root's files would
    # belong to nobody): for --device, and for HYDRIA_NVIDIA_CDI, whose request the image may make.
    specs = _cdi_specs(settings) if options.devices or settings.nvidia_cdi else None
    device_edits = _device_edits(options.devices, specs) if specs is not None and options.devices else None
    if device_edits is not None and edits.need_own_dev(device_edits.devices):
        settings = settings._replace(restrict_dev=True)  # what the spec says, in a /dev of the container's own
    if container.directory is None:
        _check_overlay_folders(container, settings)
    runtime = ensure_dir(settings.runtime_path, setting="HYDRIA_RUNTIME_PATH")
    uid, gid = os.getuid(), os.getgid()
    host_user = pwd.getpwuid(uid)
    cwd = os.getcwd()
    store_trees = options.step.store_trees if options.step else None
    source, forker = _image_source(container, settings, store_trees)  # as the user, before the namespaces

    namespaces.enter(settings, uid, gid)
    oci = options.oci
    if oci is not None and oci.hostname is not None:
        import socket

        socket.sethostname(oci.hostname)
    inner_uid, inner_gid = (0, 0) if settings.remap_root else (uid, gid)
    area = f"{runtime}/{process_tag()}"
    sc.mount("tmpfs", str(runtime), "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=700")
    if container.home is not None:
        lock.hold(os.path.join(container.home, LOCK_FILE))
    root = rootfs.mount_container(container, area, inner_uid, inner_gid, settings.native_overlayfs,
                                  settings.fast_reader, source)
    for held in (source.daemon_holds, source.read_log):
        if held is not None:
            os.close(held)  # the image's daemon (and the unpacker) alone hold them now
    if forker is not None:
        os.waitpid(forker, 0)  # long ended: the container's program must not find it among its children
    if options.misplaced_option and rc_text is None and _runs_the_command_alone(read_in_root(root, "/etc/rc")):
        raise HydriaError(f"{options.misplaced_option} after the image is the container's command, and the image "
                          "has no entrypoint to take it", hint="hydria's options go before the image: hydria start "
                          f"{options.misplaced_option} ... {options.target} [COMMAND...]")
    mounts = fstab.parse(SYSTEM_FSTAB + (NET_FSTAB if settings.unshare_net else "") + _dev_fstab(settings),
                         "system fstab")
    image_run = run_folders.image_contents(root)  # what the image has where the system fstab mounts a tmpfs
    mount_entries(mounts, root, -1, cwd)
    run_folders.restore(root, image_run)
    substitution = {**os.environ, "HYDRIA_ROOTFS": root, "ENROOT_ROOTFS": root}
    left_out = scripts.enroot_own_files(settings)
    if left_out:
        log.warning("enroot's own hooks and mount files are left out, since hydria does their work itself: %s "
                    "(remove them: docs/migration.md)", ", ".join(left_out))
    configured = [*fstab.parse(read_in_root(root, "/etc/fstab"), "image fstab", substitution),
                  *(entry for path, text in _config_texts(settings, "mounts.d", ".fstab") if not scripts.is_enroot_own(path)
                    for entry in fstab.parse(text, path, substitution))]
    _warn_never_mounted(configured, (-1, 0))
    mount_entries(configured, root, -1, cwd)  # before the hooks, as enroot mounts pass -1 (its 10-system.fstab)
    host = {**settings.environment, **os.environ}
    bare = edits.StartContext(root, area, cwd, host, {}, settings, host_user)  # before any environment
    _apply_edits(edits.combined([identity.edits(bare), localtime.edits(bare), cgroups.edits(bare)]), bare, {}, kept=())
    if settings.restrict_dev or settings.unshare_ipc:
        for name, target in DEV_LINKS.items():
            os.symlink(target, f"{root}/dev/{name}")
    image_environment = "" if options.oci else read_in_root(root, "/etc/environment")
    env_files = [text for _, text in _config_texts(settings, "environ.d", ".env")]
    sites = scripts.run_hooks(settings, root, area, options.conf,
                              environ.build(image_environment, env_files, env_options, os.environ))
    conf = sites.conf  # what --conf's environ(), mounts() and rc() printed
    if rc_text is None and conf is not None:
        rc_text = conf.rc
    environment = environ.build(image_environment, env_files, env_options, os.environ,
                                conf.environ if conf else "")
    kept = [name for name, _ in env_options]
    conf_mounts = fstab.parse(conf.mounts if conf else "", f"{options.conf.path if options.conf else ''} mounts()")
    _warn_never_mounted([*sites.edits.mounts, *conf_mounts], (0,))
    _apply_edits(sites.edits, bare, environment, kept)
    context = edits.StartContext(root, area, cwd, host, dict(environment), settings, host_user, asked)
    hook_edits = _hook_edits(context, options, device_edits, specs)
    _apply_edits(hook_edits, context, environment, kept)
    home = _home_mount(settings, host_user)
    final = [*configured, *conf_mounts, *home,
             *extra_mounts]  # last: "umount:/root" can take the home away again, as with enroot
    mount_entries(final, root, 0, cwd)
    if home and "HOME" not in kept:
        environment["HOME"] = home[0].target  # as enroot's 10-home hook: where it is bound, $HOME or /root

    identity.login_environment(environment, root, inner_uid, host_user)
    hook_state = None
    if hook_edits.hooks:
        hook_state = edits.write_bundle(area, root, environment, options.command)
        edits.run_hooks(hook_edits.hooks, edits.EARLY_STAGES, hook_state)
        import subprocess  # noqa: F401  for the startContainer hooks, after pivot_root
    if rc_text is not None:
        with open(f"{area}/rc", "w") as handle:
            handle.write(rc_text)
    _switch_root_and_exec(root, f"{area}/rc" if rc_text is not None else None, environment,
                          (hook_edits.hooks, hook_state), options, settings, (uid, inner_uid))


def _switch_root_and_exec(root: str, rc_path: str | None, environment: dict[str, str],
                          hooks: tuple[Sequence[edits.Hook], dict[str, object] | None], options: StartOptions,
                          settings: Settings, uids: tuple[int, int]) -> NoReturn:
    """The last phase: the root made read-only unless --rw, pivoted into, the late OCI hooks run,
    the process confined (bounding set, seccomp, a bundle's confinement), then its program
    executed with ``environment`` (the rc at ``rc_path``, else the image's ``/etc/rc``).
    ``uids``: the caller's and the one inside. Raises HydriaError."""
    uid, inner_uid = uids
    oci = options.oci
    if not settings.rootfs_writable:
        sc.mount(None, root, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV)
    rc_fd = os.open(rc_path, os.O_RDONLY) if rc_path else None  # read by the shell as /proc/self/fd/N
    if rc_fd is not None:
        os.set_inheritable(rc_fd, True)
    if settings.unshare_pid:
        import signal  # noqa: F401  for _become_pid_one, after pivot_root, when the host's library is out of reach
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount2(".", sc.MNT_DETACH)
    os.chdir("/")
    _enter_cwd(oci.cwd if oci is not None else "/")
    sc.unshare(sc.CLONE_NEWCGROUP)  # /proc/self/cgroup reads "/" inside (with the cgroups hook's binds)
    if settings.unshare_pid:
        _become_pid_one()
    if hooks[1] is not None:
        edits.run_hooks(hooks[0], edits.LATE_STAGES, hooks[1])
    confined = oci.confinement if oci is not None else None
    if confined is not None:
        from hydria.runtime import confinement

        confinement.apply_masks(confined)
    if inner_uid != 0 and confined is None:
        sc.empty_bounding_set()  # as enroot's switchroot: a user's program keeps no capability to regain
    if not namespaces.privileged(settings, uid):
        sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
    if confined is not None:
        sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)  # a bundle's process.noNewPrivileges is always true
        confinement.restrict(confined)
    sys.stdout.flush()
    if oci is not None:
        _exec_exactly(options.command, environment)
    shell, argv = _program(options.command, rc_fd, environment.get("SHELL") if settings.login_shell else None)
    try:
        os.execve(shell, argv, environment)
    except OSError as e:
        raise HydriaError(f"cannot run {shell} in the container: {e.strerror}",
                          hint="hydria runs the image's /etc/rc with /bin/sh; the image needs one") from None


def _check_overlay_folders(container: rootfs.Container, settings: Settings) -> None:
    """Refuse, before anything is made, a start whose overlay the mount options could not name:
    the kernel would refuse it, or mount other folders than these."""
    runtime = os.path.abspath(settings.runtime_path)
    problem = rootfs.overlay_folder_problem(runtime, lower=True)
    if problem:
        raise HydriaError(f"HYDRIA_RUNTIME_PATH {runtime} {problem}, which the container's overlay cannot be mounted "
                          "from", hint="set HYDRIA_RUNTIME_PATH to a path without ',', ':' or '\\'")
    problem = rootfs.overlay_folder_problem(container.home, lower=False) if container.home else None
    if problem:
        raise HydriaError(f"cannot start {container.name}: its folder {container.home} {problem}, which the "
                          "container's overlay cannot be mounted from",
                          hint="create it again under a name without ',' or '\\' (hydria create --name), in a "
                               "HYDRIA_DATA_PATH without them")


def _image_source(container: rootfs.Container, settings: Settings,
                  store_trees: StoreTrees | None) -> tuple[rootfs.ImageSource, int | None]:
    """The tree of what earlier starts of the image on this node read, where the read cache has
    it (container/read_cache.py), stacked above the image's mount; and the process that keeps
    what this start reads, for the next, with the ID of the child that forked it, to collect
    (unpack_behind.start_behind). For an image of the store, in a Slurm step given the node's
    trees of the store's images, the node's tree, and the store's keeper keeps what is read
    (container/store_trees.py)."""
    cache = read_cache.configured(settings)
    if container.image is None or cache is None:
        if container.image is not None and settings.read_cache_size:
            log.warning("HYDRIA_READ_CACHE_PATH %s %s: what containers read is not kept there for faster reads (set it "
                        "to a path without them)", settings.read_cache_path,
                        read_cache.path_problem(settings.read_cache_path))
        return rootfs.ImageSource(), None
    if not settings.fast_reader or installed_reader() is None:
        return rootfs.ImageSource(), None  # only hydria's reader names the files read (doctor says so)
    try:
        key = read_cache.image_key(container.image)
    except (OSError, HydriaError):
        return rootfs.ImageSource(), None  # the mount says what is wrong with it
    from hydria.container import store_trees as node_trees
    from hydria.container import unpack_behind

    if store_trees is not None and not node_trees.holds(container.image, settings):
        store_trees = None
    tree = (node_trees.tree(store_trees, key) if store_trees else None) or read_cache.kept_tree(cache, key)
    read_cache.warn_once_without_room(cache)
    default = settings.origins.get("HYDRIA_READ_CACHE_PATH") == "default"
    read_log = os.memfd_create("hydria-read-log", os.MFD_CLOEXEC)
    try:
        alive, forker = unpack_behind.start_behind(cache, container.image, key, read_log, default,
                                                   store_trees.reads if store_trees else None)
    except BaseException:
        os.close(read_log)
        raise
    return rootfs.ImageSource(tree=tree, daemon_holds=alive, read_log=read_log), forker


def _hook_edits(context: edits.StartContext, options: StartOptions, devices: edits.Edits | None,
                specs: Registry | None) -> edits.Edits:
    """The built-in hooks' and the CDI devices' edits, in the order they apply (runtime/edits.py):
    GPUs, InfiniBand and SHARP, the devices, Slurm's PMI, the MPI launch agent. A hook's module is
    imported only where it has something to do."""
    host, container, settings = context.host, context.container, context.settings
    parts = []
    if "NVIDIA_VISIBLE_DEVICES" in host or "NVIDIA_VISIBLE_DEVICES" in container:
        gpus = None
        if specs is not None and settings.nvidia_cdi:
            gpus = _nvidia_cdi_devices(specs, settings, host, container)
            if gpus is not None:  # the node's CDI spec gives them, with the devices of --device
                devices = _device_edits([*options.devices, *gpus[0]], specs)
                parts.append(edits.Edits(tuple(gpus[1].items())))
        if gpus is None:
            from hydria.hooks import nvidia

            parts.append(nvidia.edits(context))
    if "MELLANOX_VISIBLE_DEVICES" in host or "MELLANOX_VISIBLE_DEVICES" in container:
        from hydria.hooks import infiniband, sharp

        parts += [infiniband.edits(context), sharp.edits(context)]
    if devices is not None:
        parts.append(devices)
    if options.step is None:  # a step's tasks bring their own SLURM_*/PMI variables
        parts.append(slurm_pmi.edits(context))
    if options.remote_start is not None:
        from hydria.hooks import launch

        parts.append(launch.edits(context, options.remote_start))
    return edits.combined(parts)


def _apply_edits(changes: edits.Edits, context: edits.StartContext, environment: dict[str, str], kept: Sequence[str]) -> None:
    """The one place where edits change the container, in runtime/edits.py's order: folders, files, mounts
    (device nodes first), links, one refresh of the loader cache, the environment (``kept``: --env's
    names). A file, or an optional link, that the root cannot take (a read-only unpacked root)
    leaves the image's own."""
    root = context.root
    for folder in changes.folders:
        try:
            edits.make_folder(root, folder)
        except (OSError, HydriaError):
            continue
    for file in changes.files:
        try:
            edits.write_file(root, file)
        except (OSError, HydriaError):
            continue
    mount_entries([*edits.device_mounts(changes.devices, root), *changes.mounts], root, 0, context.cwd)
    for link in changes.links:
        if not link.optional:
            link_in_root(root, link.path, link.target, link.origin)
            continue
        try:
            if os.path.isdir(resolve_in_root(root, os.path.dirname(link.path))):
                link_in_root(root, link.path, link.target, link.origin)
        except HydriaError:
            continue
    if changes.libraries:
        from hydria.hooks import ldcache

        ldcache.refresh(root, " and ".join(dict.fromkeys(changes.libraries)))
    edits.environment_over(environment, changes, kept)


def _cdi_specs(settings: Settings) -> Registry:
    from hydria.hooks import cdi

    return cdi.load(cdi.spec_dirs(settings.cdi_spec_dirs))


def _device_edits(devices: Sequence[str], specs: Registry) -> edits.Edits:
    """The edits of the CDI devices asked for, with each host device node checked."""
    from hydria.hooks import cdi

    chosen = cdi.edits_for(devices, specs)
    cdi.check_devices(chosen.devices)
    return chosen


def _nvidia_cdi_devices(specs: Registry, settings: Settings, host: Mapping[str, str],
                        environment: Mapping[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """``HYDRIA_NVIDIA_CDI``: the CDI devices that ``NVIDIA_VISIBLE_DEVICES`` names and the
    variables the built-in hook would set, where this node has a spec of NVIDIA's GPUs; None to
    leave the request to the built-in hook."""
    from hydria.hooks import nvidia

    request = nvidia.request_from(host, environment)
    if request is None or nvidia.CDI_KIND not in specs.kinds():
        return None
    names, variables = nvidia.cdi_devices(request, host, str(settings.nvidia_driver_root))
    return (names, variables) if names else None


def _runs_the_command_alone(rc: str) -> bool:
    """Whether the image's rc runs a given command as it is (no entrypoint before it)."""
    return any(line.strip() == 'exec "$@"' for line in rc.splitlines())


def _home_mount(settings: Settings, host_user: pwd.struct_passwd) -> list[fstab.MountEntry]:
    """As enroot: ``$HOME`` (not the passwd entry), with the mounts inside it (rbind), at ``/root``
    when remapped to root."""
    if not settings.mount_home:
        return []
    home = os.environ.get("HOME") or host_user.pw_dir
    return [fstab.MountEntry(home, "/root" if settings.remap_root else home, "none",
                             ("x-create=dir", "rbind", "rw", "nosuid"))]


def _dev_fstab(settings: Settings) -> str:
    if not (settings.restrict_dev or settings.unshare_ipc):
        return ""
    return DEV_FSTAB + (PRIVATE_IPC_FSTAB if settings.unshare_ipc else SHARED_IPC_FSTAB)


def _config_texts(settings: Settings, folder: str, suffix: str) -> list[tuple[str, str]]:
    files = [*listed(os.path.join(settings.sysconf_path, folder), suffix),
             *listed(os.path.join(settings.config_path, folder), suffix)]
    texts = []
    for path in files:
        try:
            texts.append((path, read_text(path)))  # opened without waiting on a FIFO
        except FileNotFoundError:
            continue  # a link to nothing
        except OSError as e:
            if e.errno not in (errno.EISDIR, errno.EINVAL):
                raise
            log.warning("%s: %s: left out", path, NOT_REGULAR)
    return texts


def _warn_never_mounted(entries: Sequence[fstab.MountEntry], passes: tuple[int, ...]) -> None:
    """Warn of each entry whose pass (fstab's sixth field, or its fifth where that is 0) is none
    of ``passes``: nothing mounts it (as with enroot, which says nothing)."""
    for entry in entries:
        if entry.passno not in passes:
            log.warning("%s at %s (from %s): not mounted: its pass, %d, is none that is mounted (0: after the "
                        "hooks%s)", entry.source, entry.target, entry.origin, entry.passno,
                        "; -1: before them" if -1 in passes else "")


def _program(command: Sequence[str], rc_fd: int | None, login_shell: str | None) -> tuple[str, list[str]]:
    """The shell to execute and its arguments: ``/bin/sh RC CMD...``, where the rc (``--rc`` or
    the image's ``/etc/rc``) runs the command. With ``HYDRIA_LOGIN_SHELL`` (``login_shell``: the
    container's ``$SHELL``) that shell runs as a login shell (``-bash``), which reads
    ``/etc/profile`` (and so ``/etc/profile.d``) and the user's profile first, as enroot's does."""
    shell = "/bin/sh"
    if login_shell is not None and login_shell.startswith("/") and os.access(login_shell, os.X_OK):
        shell = login_shell
    name = ("-" if login_shell is not None else "") + os.path.basename(shell)
    rc = f"/proc/self/fd/{rc_fd}" if rc_fd is not None else "/etc/rc"
    if rc_fd is not None or os.path.isfile("/etc/rc"):
        return shell, [name, rc, *command]
    if not command:
        return shell, [name]
    if " " in command[0]:
        return shell, [name, "-c", command[0], *command[1:]]
    return shell, [name, "-c", 'exec "$@"', "sh", *command]


def _enter_cwd(cwd: str) -> None:
    if cwd == "/":
        return
    try:
        os.chdir(cwd)
    except OSError as e:
        raise HydriaError(f"cannot enter the working directory {cwd} in the container: {e.strerror}",
                          hint="a folder of the container's root file system, or of a mount") from None


def _exec_exactly(command: Sequence[str], environment: dict[str, str]) -> NoReturn:
    """Run ``command`` as it is: its first word found on the environment's ``PATH``.

    Slurm 23.11 and newer look srun's command up on the node's ``PATH`` before the container
    exists (``sh`` becomes ``/usr/bin/sh`` on a merged-/usr host): a path the container lacks is
    looked up again by its name on the container's ``PATH``, as the user wrote it."""
    try:
        try:
            os.execvpe(command[0], list(command), environment)
        except FileNotFoundError:
            if not command[0].startswith("/"):
                raise
            os.execvpe(os.path.basename(command[0]), list(command), environment)
    except OSError as e:
        raise HydriaError(f"cannot run {command[0]} in the container: {e.strerror}",
                          hint="the program must be in the root file system, on the PATH that the "
                               "environment gives") from None


def _become_pid_one() -> None:
    """``--pid``: the program is PID 1 of a new PID namespace; this process waits for it,
    forwards SIGINT and SIGTERM, and exits with its status."""
    import signal  # imported before pivot_root by start() (its enum import would cost every start)

    sc.unshare(sc.CLONE_NEWPID)
    child = os.fork()
    if child == 0:
        sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)  # hydria killed: the container goes with it
        sc.mount("proc", "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
        return
    lock.release_all()  # the container is set up; this process only waits
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, frame: os.kill(child, number))
    sc.exit_like(child)
