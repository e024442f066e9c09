"""One job step's container, from the options to a stopped process inside it, and the cleanup.

``start`` runs as the job's user in a child of slurmstepd. It imports the image (or takes a
squashfs path), creates or reuses the named container, and starts it like ``hydria start`` with
``sh -c 'kill -STOP $$'`` as the command: the rc (and the entrypoint when asked for) runs, then the
process stops itself, holding the container's namespaces, cwd and environment for the shim, which
joins them in every task. Unnamed containers start straight from the image file (nothing to
unpack or remove); named ones persist as ``pyxis_NAME`` in the data path (pyxis's names).
"""

from __future__ import annotations

import os

from hydria.config import Settings
from hydria.container.named import container_path
from hydria.digits import is_number
from hydria.errors import HydriaError
from hydria.hooks import slurm_pmi
from hydria.log import Logger
from hydria.paths import NAME_MAX, ensure_dir, process_tag, read_text
from hydria.record import TYPE_CHECKING
from hydria.runtime.filesystems import file_system_type, may_be_shared
from hydria.runtime.fstab import READ_ONLY_FILE_BIND, MountEntry
from hydria.slurm import importer_plugin, task_env
from hydria.slurm.plugin_config import DEFAULT_PLUGIN, JOB_SCOPE, PluginConfig
from hydria.slurm.shim import MarkChannel
from hydria.slurm.step_options import ContainerOptions
from hydria.slurm.task_env import StepFacts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from hydria.container.store_trees import StoreTrees

log = Logger(__name__)

DISABLED_STATUS = 64  # no container for this step (the shim gets the statuses from here: slurm/generated.py)
# Marks (on the shim's own descriptor: hydria.slurm.shim) tell the shim what it needs (its
# read_marks): a line for the user's terminal, that the step leaves something to clean up, and the
# options as resolved here.
CLEANUP_MARK = "@cleanup"
RC_LOCAL = 'exec "$@"\n'  # replaces the image's rc.local, so that its entrypoint does not run
ATTACH_STATUS = 65  # join the running container the "@attach PID" line names
STORE_STATUS = 66  # the image store lacks "@store-import URI": its owner imports it, then the start runs again
STORE_MARK = "@store-import "
STOP_COMMAND = ("sh", "-c", "kill -STOP $$; exit 0")
# pyxis's names, so that epilog scripts written for pyxis (rm pyxis_*) keep working
NAME_PREFIX = "pyxis_"


def user_dir(settings: Settings) -> str:
    """The user's scratch space on this node: the rc.local override, the steps' folders. In a
    shared temporary folder another user may have made its name first, which would stop every
    step: then a folder in the user's cache, named after the node."""
    path = os.path.join(settings.temp_path, f"hydria-slurm-{os.getuid()}")
    try:
        squatted = os.lstat(path).st_uid != os.getuid()
    except OSError:
        squatted = False
    if squatted:
        path = os.path.join(settings.cache_path, f"slurm-{os.uname().nodename}")
        return ensure_dir(path, setting="HYDRIA_CACHE_PATH")
    return ensure_dir(path, setting="HYDRIA_TEMP_PATH")


def step_dir(settings: Settings, step: str) -> str:
    """A step's scratch space on this node (made only when the step imports an image): named after
    the node too, since the nodes of a step may share the temporary folder."""
    return os.path.join(user_dir(settings), f"{step}.{os.uname().nodename}")


def start(options: ContainerOptions, step: str, settings: Settings, environment: Mapping[str, str],
          marks: MarkChannel, facts: StepFacts, scope: str = "global", batch_script: str | None = None,
          attach: bool = True, plugin: PluginConfig = DEFAULT_PLUGIN, store_trees: StoreTrees | None = None) -> int:
    """Set up the step's container and stop inside it (this process becomes the holder), or return
    the PID of the named container when it is running already, for the tasks to join (attach).
    Either way, the tasks' environment plan goes to the shim (task_env). ``store_trees``: the
    node's trees of the store's images, which the shim mounted for the step (container/store_trees.py).
    Raises HydriaError."""
    from hydria.container.start import SlurmStep, StartOptions
    from hydria.container.start import start as start_container
    from hydria.container.target import resolve_target

    _tell_shim(options, marks)
    joinable = options.name is not None and options.name_flag != "no_exec" and attach
    name = container_name(options, step, scope) or ""
    if joinable and (pid := _running_pid(name, settings)) is not None:
        return _join(options, pid, environment, facts, marks)
    cwd = _job_cwd(environment)
    os.chdir(cwd)
    for entry in options.mounts:  # as pyxis: checked here, with its message
        if entry.is_bind and entry.source.startswith("/") and not os.path.exists(entry.source):
            raise HydriaError(f"--container-mounts: source path does not exist: {entry.source}")
    if options.save:
        _check_save_path(os.path.join(cwd, options.save), marks)
    settings = _step_settings(options, settings)
    if options.name is not None:
        _refuse_shared_across_nodes(name, settings, environment)
    scratch = step_dir(settings, step)
    target = _container(options, _prefix(step, scope), step, settings, scratch, cwd, plugin, marks)
    if joinable:  # steps that start at once: the first sets the container up, the others join it
        from hydria.container.start import LOCK_FILE
        from hydria.runtime import lock

        lock_file = os.path.join(container_path(settings.data_path, name), LOCK_FILE)
        lock.hold(lock_file)
        if (pid := _running_pid(name, settings)) is not None:
            lock.release(lock_file)
            return _join(options, pid, environment, facts, marks)
    entries = list(options.mounts)
    if batch_script:  # sbatch: the script in slurmd's spool runs inside, at the same path
        entries.append(MountEntry(batch_script, batch_script, "none", READ_ONLY_FILE_BIND,
                                  origin="hydria"))
    pmix = slurm_pmi.pmix_directories(environment)
    entries += slurm_pmi.binds(pmix)  # srun --mpi=pmix: the step's directories, when ready
    if not options.entrypoint:
        entries.append(MountEntry(_rc_local(settings), "/etc/rc.local", "none", READ_ONLY_FILE_BIND,
                                  origin="hydria"))
    env = [f"{variable}={environment[variable]}" for variable in options.env if environment.get(variable)]
    temporary = options.name is None and options.save is not None
    if os.path.exists(scratch) or temporary or _uses_importer(options, plugin):
        marks.send(CLEANUP_MARK)  # the shim runs `hydria slurm cleanup` only when told to
    _send_plan(options, facts._replace(pmix_directory=bool(pmix.server)), marks)
    start_container(resolve_target(target, settings),
                    StartOptions(target, STOP_COMMAND, env=env, entries=entries, devices=options.devices,
                                 step=SlurmStep(store_trees)), settings)
    raise AssertionError("start() execs the container or raises")


def _tell_shim(options: ContainerOptions, marks: MarkChannel) -> None:
    """The options the shim acts on itself, with their defaults applied (HYDRIA_CONTAINER_*, plugstack)."""
    for mark in (f"@workdir {options.workdir}" if options.workdir else "", "@save" if options.save else "",
                 "@entrypoint-log" if options.entrypoint_log and options.entrypoint else ""):
        if mark:
            marks.send(mark)


def _send_plan(options: ContainerOptions, facts: StepFacts, marks: MarkChannel) -> None:
    for mark in task_env.plan(options.env, facts):
        marks.send(mark)


def _join(options: ContainerOptions, pid: int, environment: Mapping[str, str], facts: StepFacts,
          marks: MarkChannel) -> int:
    """The tasks join process ``pid``'s container: its environment is another step's when it
    names a step other than this one (a holder names none), and it has this step's PMIx server
    directory only where someone mounted it."""
    from hydria.container.execute import target_environment

    try:
        theirs = target_environment(pid).get("SLURM_STEP_ID")
    except HydriaError:  # it ended: the shim finds that out, and starts a container of the step's own
        theirs = None
    server = slurm_pmi.pmix_directories(environment).server
    _send_plan(options, facts._replace(
        foreign=theirs is not None and theirs != environment.get("SLURM_STEP_ID"),
        pmix_directory=bool(server) and os.path.isdir(f"/proc/{pid}/root{server}")), marks)
    if options.mounts:
        log.warning("ignoring --container-mounts when attaching to a running container")
    if options.devices:
        log.warning("ignoring --container-device when attaching to a running container: it has the devices "
                    "its first step gave it")
    _check_unshared(options.unshare, pid)
    log.info("reusing existing container namespaces")
    return pid


def _running_pid(name: str, settings: Settings) -> int | None:
    """The first process of container ``name`` when it is running (another step's holder, or a
    ``hydria start``), else None."""
    from hydria.container.running import running

    path = container_path(settings.data_path, name)
    processes = running({name: path}, settings.runtime_path).get(name, []) if os.path.isdir(path) else []
    return processes[0].pid if processes else None


def _check_unshared(namespaces: Sequence[str], pid: int) -> None:
    labels = {"net": "network", "ipc": "IPC", "uts": "UTS"}
    for namespace in namespaces:
        if os.readlink(f"/proc/{pid}/ns/{namespace}") == os.readlink(f"/proc/self/ns/{namespace}"):
            raise HydriaError(f"--container-unshare={namespace} requested but the container is not in a "
                              f"separate {labels[namespace]} namespace")


def cleanup(options: ContainerOptions, step: str, settings: Settings, environment: Mapping[str, str],
            scope: str = "global", export: bool = False, plugin: PluginConfig = DEFAULT_PLUGIN) -> str | None:
    """When the step ends: with ``export`` (every task started), write the container to the
    --container-save file (returned); then remove the step's temporary container and scratch space.
    Raises HydriaError when the export fails (the rest is cleaned up all the same)."""
    name = container_name(options, step, scope)
    try:
        if export and options.save and name:
            from hydria.container.export import export as export_container

            path = os.path.join(_job_cwd(environment), options.save)
            export_container(name, path, True, settings)
            return path
    except HydriaError as e:
        raise HydriaError(f"failed to export container {name} to {options.save}: {e.message}") from None
    finally:
        if options.name is None and name and os.path.isdir(container_path(settings.data_path, name)):
            from hydria.container.named_containers import NamedContainers

            NamedContainers(settings).remove([name])
        from hydria.trees import delete_tree

        try:
            delete_tree(step_dir(settings, step))
        except OSError:
            pass  # none made (a step without scratch), or what cannot go stays for the job's end
        _release(options, plugin)
    return None


def _check_save_path(path: str, marks: MarkChannel) -> None:
    """--container-save writes when the step ends: say now, not after the job's hours of work,
    that the folder is missing or not writable. A warning only: the step itself may make it."""
    from hydria.paths import output_file

    try:
        output_file(path, path, force=True)
    except HydriaError as e:
        marks.log(f"warning: --container-save={path} cannot be written as things are ({e.message}): "
                  "the container will not be saved unless the step makes that possible")


def container_name(options: ContainerOptions, step: str, scope: str) -> str | None:
    """The container the step runs: NAME given, a temporary one when an unnamed container is to be
    saved (its writes must land somewhere), else none (the image file is started directly)."""
    if options.name is not None:
        prefix = _prefix(step, scope)
        room = NAME_MAX - len(prefix.encode())
        if len(options.name.encode(errors="surrogateescape")) > room:
            raise HydriaError(f"--container-name: the name is longer than {room} bytes, the most that fits in a "
                              f"file name after the prefix {prefix} that names the container in the data path",
                              hint="choose a shorter --container-name")
        return prefix + options.name
    return _temporary_name(_prefix(step, scope), step) if options.save else None


def _temporary_name(prefix: str, step: str) -> str:
    """Named after the node too: the nodes of a step may share the data path."""
    return f"{prefix}{step}.{os.uname().nodename}"


def _refuse_shared_across_nodes(name: str, settings: Settings, environment: Mapping[str, str]) -> None:
    """A named container is one directory of overlay writes: where the step's nodes share the
    data path (a network file system), each would mount it read-write at once, and two overlays
    over one upper directory corrupt it. Raises HydriaError with the ways out."""
    nodes = environment.get("SLURM_STEP_NUM_NODES", "1")
    if not is_number(nodes) or int(nodes) < 2:
        return
    data = os.path.realpath(settings.data_path)
    kind = file_system_type(data)
    if may_be_shared(kind):
        raise HydriaError(f"container {name}: this step runs on {nodes} nodes, which share the data path "
                          f"{data} ({kind}): each would write the one container at once, which corrupts it",
                          hint="run the step on one node (-N1); or give every node an image file: hydria export "
                               f"{name}, then --container-image=FILE; or the administrator puts "
                               "HYDRIA_DATA_PATH on node-local storage, one container per node (docs/slurm.md)")


def _rc_local(settings: Settings) -> str:
    """The user's rc.local override, written once (atomically) and shared by the steps."""
    folder = user_dir(settings)
    path = os.path.join(folder, "rc.local")
    if not os.path.isfile(path) or read_text(path) != RC_LOCAL:
        staging = os.path.join(folder, f".rc.local.{process_tag()}")
        with open(staging, "w") as handle:
            handle.write(RC_LOCAL)
        os.replace(staging, path)
    return path


def _job_cwd(environment: Mapping[str, str]) -> str:
    """The step's working directory: PWD, else slurmstepd's own, which is the step's."""
    return environment.get("PWD") or os.getcwd()


def _prefix(step: str, scope: str) -> str:
    return f"{NAME_PREFIX}{step.partition('.')[0]}_" if scope == JOB_SCOPE else NAME_PREFIX


def remove_job_containers(job: str, settings: Settings) -> None:
    """container_scope=job: remove every ``pyxis_JOB_*`` container of the user when the job ends.
    Raises HydriaError naming the containers that could not be removed."""
    from hydria.container.named_containers import NamedContainers

    containers = NamedContainers(settings)
    prefix = f"{NAME_PREFIX}{job}_"
    for name in containers.names():
        if name.startswith(prefix):
            try:
                containers.remove([name])
            except (HydriaError, OSError) as e:
                log.warning("cannot remove %s: %s", name, e)
    leftovers = [name for name in containers.names() if name.startswith(prefix)]
    if leftovers:
        raise HydriaError("; ".join(f"container {name} was not removed" for name in leftovers))


def _step_settings(options: ContainerOptions, settings: Settings) -> Settings:
    changes: dict[str, bool] = {f"unshare_{ns}": True for ns in options.unshare}
    for setting, value in (("mount_home", options.mount_home), ("remap_root", options.remap_root),
                           ("rootfs_writable", options.writable)):
        if value is not None:
            changes[setting] = value
    return settings._replace(**changes)  # type: ignore[arg-type]


def _container(options: ContainerOptions, prefix: str, step: str, settings: Settings, scratch: str,
               cwd: str, plugin: PluginConfig, marks: MarkChannel) -> str:
    """What to start: a container name, or an image file for an unnamed container."""
    if options.name is None and not options.save:
        assert options.image is not None
        return _image_file(options.image, scratch, settings, cwd, plugin, marks)
    if options.name is None:  # a temporary container, so that the writes to save persist
        assert options.image is not None
        name = _temporary_name(prefix, step)
        _create(_image_file(options.image, scratch, settings, cwd, plugin, marks), name, settings, force=True, unpack=False)
        _release(options, plugin)
        return name
    name = prefix + options.name
    exists = os.path.isdir(container_path(settings.data_path, name))
    if options.name_flag == "create" and exists:
        raise HydriaError('"create" flag was passed to --container-name but the container already exists')
    if options.name_flag == "exec":
        raise HydriaError('"exec" flag was passed to --container-name but the container is not running')
    if exists:
        log.info("reusing existing container filesystem")
        return name
    if options.image is None:
        raise HydriaError(f'a container with name "{name}" does not exist, and --container-image is not set')
    image = _image_file(options.image, scratch, settings, cwd, plugin, marks)
    marks.log(f"creating container filesystem: {name}")
    try:
        _create(image, name, settings, force=False, unpack=settings.unpack)
    except HydriaError as e:
        if not os.path.isdir(container_path(settings.data_path, name)):  # another step of the job may have just created it
            log.error("%s", e.message)
            raise HydriaError(f"failed to create container filesystem for image: {options.image}") from None
    finally:
        _release(options, plugin)
    return name


def _create(image: str, name: str, settings: Settings, *, force: bool, unpack: bool) -> None:
    # here: a step that starts an existing container spares pathlib's import
    from pathlib import Path

    from hydria.container.named_containers import NamedContainers

    NamedContainers(settings).create(Path(image), name, force=force, unpack=unpack)


def _uses_importer(options: ContainerOptions, plugin: PluginConfig) -> bool:
    return bool(plugin.importer) and options.image is not None and not options.image.startswith((".", "/"))


def _release(options: ContainerOptions, plugin: PluginConfig) -> None:
    """Tell the importer plugin its file is no longer needed: the container holds its own copy
    (a hardlink or copy), or the step has ended."""
    if _uses_importer(options, plugin):
        importer_plugin.release(plugin.importer, plugin.runtime_path)


def _image_file(image: str, scratch: str, settings: Settings, cwd: str, plugin: PluginConfig,
                marks: MarkChannel) -> str:
    """A squashfs path as given, or the registry image imported into the step's scratch space (the
    image kept in the cache, when that is on another file system), or by the admin's importer
    plugin."""
    if image.startswith((".", "/")):
        path = os.path.normpath(os.path.join(cwd, image))
        if not os.path.isfile(path):
            raise HydriaError(f"--container-image: no such file: {path}")
        return path
    from hydria.container.target import IMAGE_SUFFIXES
    from hydria.image.importer import import_image

    as_file = f"for the file, write --container-image=./{image}: an image path starts with / or ., as with pyxis"
    looks_like_a_file = image.endswith(IMAGE_SUFFIXES) and "://" not in image
    if looks_like_a_file and os.path.isfile(os.path.join(cwd, image)):  # not worth a registry's answer
        raise HydriaError(f"--container-image={image} names a registry image, and a file of that name is here",
                          hint=as_file)
    uri = image if image.startswith(("docker://", "dockerd://")) else f"docker://{image}"
    if plugin.importer:
        return importer_plugin.get(plugin.importer, uri, plugin.runtime_path)
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    target = os.path.join(scratch, "image.sqsh")
    if os.path.lexists(target):
        os.unlink(target)
    if int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1) <= 1:
        marks.log(f"importing docker image: {image}")  # as pyxis: not once per task of a large step
    try:
        # A kept image on another file system (the cache in $HOME, scratch in local /tmp) is used
        # where it is, rather than copied into scratch by every step.
        missing = (lambda: _ask_for_store_import(uri, marks)) if plugin.store_owner else None
        imported = str(import_image(uri, settings, output=target, in_place=True, on_store_miss=missing))
    except StoreImportRequested:
        raise
    except HydriaError as e:
        log.error("%s", e.message)
        raise HydriaError(f"failed to import docker image: {image}", hint=as_file if looks_like_a_file else e.hint) \
            from None
    marks.log(f"imported docker image: {image}")
    return imported


class StoreImportRequested(HydriaError):
    """The image store lacks the step's image: the shim has its owner import it (STORE_STATUS)."""


def _ask_for_store_import(uri: str, marks: MarkChannel) -> None:
    """The user's registry request resolved ``uri``, which the store lacks: the shim runs the
    store's owner's import (plugstack ``store_owner``) and this start again."""
    marks.send(STORE_MARK + uri)
    raise StoreImportRequested(f"the image store lacks {uri}")
