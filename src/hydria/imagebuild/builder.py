"""``hydria build``: a Dockerfile's stages, built in order, each instruction's result cached.

Only the stages the target needs are built (its ``FROM`` chain and its ``COPY --from`` sources).
A stage starts from a registry image (imported once into the build cache as a squashfs, the
lowest folder of every step), from ``scratch``, or from an earlier stage. Instructions that change
files (``RUN``, ``COPY``, ``ADD``, ``WORKDIR``) run in build/sandbox.py and become layers; the
others change the config (build/state.py). Every instruction extends the stage's key; a step whose
key the cache knows is not run again (build/cache.py).

Each step is shown as ``docker build --progress=plain`` shows it: ``#N [STAGE K/M] INSTRUCTION``,
its output, then ``#N DONE 1.2s`` or ``#N CACHED``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from hydria.config import Settings
from hydria.errors import HydriaError, InvalidArgument
from hydria.image.ref import manifest as mf
from hydria.image.trust import policy
from hydria.imagebuild import copying, dockerfile, download, ignore, sandbox, steps
from hydria.imagebuild.cache import BuildCache, key_of
from hydria.imagebuild.dockerfile import Dockerfile, Instruction, Stage
from hydria.imagebuild.host_inputs import HostInputs
from hydria.imagebuild.layers import Layer, is_empty, write_layer
from hydria.imagebuild.state import (
    DEFAULT_PATH,
    PROXY_ARGS,
    LayerRef,
    StageImage,
    apply_config,
    resolve_path,
)
from hydria.imagebuild.words import expand
from hydria.log import Logger
from hydria.paths import open_binary
from hydria.record import Record

if TYPE_CHECKING:
    from hydria.image.kept.user_cache import CachedImage
    from hydria.image.progress import Progress

log = Logger(__name__)
FILE_STEPS = frozenset({"RUN", "COPY", "ADD", "WORKDIR"})


class BuildFailed(HydriaError):
    """A ``RUN`` that exited with a status other than 0."""


class BuildOptions(Record):
    context: str
    dockerfile: str | None = None
    build_args: Mapping[str, str] = {}
    target: str | None = None
    platform: str | None = None
    no_cache: bool = False
    host: HostInputs = HostInputs()  # secrets, volumes, CA bundle, proxies


class Built(Record):
    image: StageImage
    uri: str  # what the image is called in messages and in its provenance
    cache: BuildCache  # the one the build used (its ID mode decided), which the outputs read


def build(options: BuildOptions, settings: Settings, stack: ExitStack, show: Callable[[str], None]) -> Built:
    """Build the target stage, telling ``show`` each step. Raises HydriaError (DockerfileError,
    BuildFailed, ...)."""
    context = os.path.abspath(options.context)
    if not os.path.isdir(context):
        raise InvalidArgument(options.context, hint="the build context is a folder (often '.')")
    path = options.dockerfile or os.path.join(context, "Dockerfile")
    parsed = dockerfile.read(path)
    builder = _Builder(parsed, context, path, options, settings, stack, show)
    stage = builder.target_stage()
    _check_stack(parsed, stage)
    image = builder.build_stage(stage)
    builder.warn_unused_args()
    return Built(image, f"build of {os.path.relpath(path)}", builder.cache)


def _check_stack(parsed: dockerfile.Dockerfile, stage: dockerfile.Stage) -> None:
    """Raise DockerfileError, before anything runs, where ``stage`` has more steps that make layers
    (its own and those of the stages it stands on) than the kernel's overlay stacks: its last
    steps could never run (a step stands on every layer below it, and on one of its base at least)."""
    steps, below = 0, stage
    while True:
        steps += sum(1 for instruction in below.instructions if instruction.keyword in FILE_STEPS)
        earlier = parsed.stage(below.base.lower())
        if earlier is None or earlier.number >= below.number:
            break
        below = earlier
    if steps > sandbox.OVERLAY_MAX_LAYERS:
        raise stage.instruction.error(
            f"stage {stage.name or stage.number} has {steps} steps that make layers ({', '.join(sorted(FILE_STEPS))}), "
            f"with the stages it stands on: more than the {sandbox.OVERLAY_MAX_LAYERS} that the kernel's overlay "
            "stacks, so its last steps could not run",
            hint="join RUN steps with && (or COPY what several steps copy at once), or build a base image from the "
                 "first part of the Dockerfile and FROM it")


def _ignore_patterns(context: str, dockerfile_path: str) -> tuple[ignore.Pattern, ...]:
    """``Dockerfile.dockerignore`` beside the Dockerfile, else the context's ``.dockerignore``;
    and last, so that nothing includes them again, the layer images of layered outputs that a
    build into the context left (imagebuild/output.py): hydria's, never the image's."""
    from hydria.runtime.layered import LAYER_FOLDER

    own = tuple(ignore.parse(f"**/{LAYER_FOLDER}"))
    in_context = os.path.join(context, ".dockerignore")
    for candidate in (f"{dockerfile_path}.dockerignore", in_context):
        if candidate == in_context and os.path.islink(candidate) and not _inside(os.path.realpath(candidate), context):
            raise HydriaError(f"{candidate} is a link to {os.path.realpath(candidate)}, outside the build context",
                              hint="a build reads nothing of the host outside its context: copy the file in")
        try:
            with open_binary(candidate) as handle:
                return (*ignore.parse(handle.read().decode()), *own)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise HydriaError(f"cannot read {candidate}: {e.strerror}",
                              hint="it must be a text file of .dockerignore patterns") from None
        except UnicodeDecodeError:
            raise HydriaError(f"cannot read {candidate}: it is not UTF-8 text",
                              hint="it must be a text file of .dockerignore patterns") from None
    return own


def _inside(path: str, folder: str) -> bool:
    top = os.path.realpath(folder)
    return path == top or path.startswith(top.rstrip("/") + "/")


class _Builder:
    def __init__(self, parsed: Dockerfile, context: str, path: str, options: BuildOptions, settings: Settings,
                 stack: ExitStack, show: Callable[[str], None]) -> None:
        self.parsed = parsed
        self.show = show
        self.options = options
        self.settings = settings
        self.stack = stack
        self.cache = BuildCache(settings.cache_path, settings.build_subordinate_ids)
        self.cache.clear_abandoned()
        self.platform = mf.parse_platform(options.platform)
        self.context = copying.SourceRoot(context, "the build context", _ignore_patterns(context, path))
        self.built: dict[int, StageImage] = {}
        self.building: set[int] = set()
        self.pulled: dict[str, StageImage] = {}
        self.used_args: set[str] = set()
        self.step_number = 0
        self.global_args = self._global_args()
        ids = self.cache.idmap
        if ids is not None:
            try:
                ids.run(lambda: None)  # the system's helpers may refuse the ranges (or a namespace within one)
            except HydriaError as e:
                log.warning("%s: building with one ID mapped (HYDRIA_BUILD_SUBORDINATE_IDS=false skips the try)", e)
                ids = self.cache.idmap = None
        self._note(f"steps run as root with {ids.describe()}" if ids is not None else
                   "steps run as root with one ID mapped: every file belongs to root (docs/build.md)")

    # --- stages ---------------------------------------------------------------------------------

    def _global_args(self) -> dict[str, str]:
        platform = f"{self.platform.os}/{self.platform.architecture}"
        values = {"TARGETPLATFORM": platform, "TARGETOS": self.platform.os, "TARGETARCH": self.platform.architecture,
                  "TARGETVARIANT": self.platform.variant or "", "BUILDPLATFORM": platform,
                  "BUILDOS": self.platform.os, "BUILDARCH": self.platform.architecture, "BUILDVARIANT": ""}
        for instruction in self.parsed.global_args:
            for argument in instruction.arguments:
                name, equals, default = argument.partition("=")
                if name in self.options.build_args:
                    values[name] = self.options.build_args[name]
                    self.used_args.add(name)
                elif equals:
                    values[name] = expand(default, values, self.parsed.escape)
        return values

    def target_stage(self) -> Stage:
        if self.options.target is None:
            return self.parsed.stages[-1]
        stage = self.parsed.stage(self.options.target)
        if stage is None:
            names = ", ".join(s.name for s in self.parsed.stages if s.name) or "none"
            raise InvalidArgument(f"--target {self.options.target}", hint=f"the Dockerfile's stages: {names}")
        return stage

    def build_stage(self, stage: Stage) -> StageImage:
        if stage.number in self.built:
            return self.built[stage.number]
        self.building.add(stage.number)
        image = self._from(stage)
        total = len(stage.instructions)
        label = stage.name or str(stage.number)
        for number, instruction in enumerate(stage.instructions, 1):
            self._dispatch(instruction, image, f"{label} {number}/{total}")
        self.building.discard(stage.number)
        self.built[stage.number] = image
        return image

    def _from(self, stage: Stage) -> StageImage:
        word = expand(stage.base, self.global_args, self.parsed.escape)
        if not word:
            raise stage.instruction.error(f"{stage.base!r} expands to nothing",
                                          hint="give the ARG a default, or --build-arg NAME=IMAGE")
        self._show(f"[{stage.name or stage.number}] FROM {word}")
        earlier = self.parsed.stage(word)
        if earlier is not None and earlier.number < stage.number:
            image = self.build_stage(earlier).derived()
        elif word.lower() == "scratch":
            image = StageImage({"Env": [f"PATH={DEFAULT_PATH}"]}, self.platform, key_of("scratch", str(self.platform)))
        else:
            platform = self.platform
            if stage.platform is not None:
                platform = mf.parse_platform(expand(stage.platform, self.global_args, self.parsed.escape).split("/")[-1])
            image = self.pull(word, platform, stage.instruction).derived()
        for trigger_text in image.config.pop("OnBuild", None) or []:
            trigger = dockerfile.parse_trigger(trigger_text, stage.instruction.where)
            self._dispatch(trigger, image, f"{stage.name or stage.number} ONBUILD")
        return image

    def pull(self, word: str, platform: mf.Platform, instruction: Instruction) -> StageImage:
        """A registry image (``debian:12``, ``nvcr.io/nvidia/pytorch:24.01-py3``) as a stage base."""
        from hydria.image.importer import blob_cache, layered_entry, write_image
        from hydria.image.progress import Progress
        from hydria.image.ref.reference import RegistryImage, parse
        from hydria.image.sources.registry import RegistrySource
        from hydria.image.squash.squashfs import mounted_only_plan

        known = self.pulled.get(f"{word} {platform}")
        if known is not None:
            return known
        try:
            ref = parse(f"docker://{word}")
        except HydriaError as e:
            raise instruction.error(f"{word}: {e}", hint=e.hint) from None
        assert isinstance(ref, RegistryImage)
        rule = policy.check(ref, self.settings)
        progress = Progress(live=False)
        source = RegistrySource(ref, self.settings, blob_cache(self.settings), progress)
        self.stack.callback(source.close)
        resolved = source.resolve(platform)
        digest = resolved.digest or ""
        policy.check_source(rule, ref, source, digest)
        config = resolved.config
        inner = dict(config.get("config") or {})
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        if len(diff_ids) != len(resolved.layers):
            raise instruction.error(f"{word}: the image config lists {len(diff_ids)} layers, its manifest "
                                    f"{len(resolved.layers)}", hint="the image is malformed")
        squashfs = self.cache.base_image(digest)
        fetched: list[bool] = []  # the layers were asked for once (twice would download them twice)

        def open_base_blob(descriptor: mf.Descriptor) -> AbstractContextManager[mf.Blob]:
            if not fetched:  # the outputs read the layers where no step needed the base's files
                fetched.append(True)
                resolved.fetch_layers()
            return resolved.open_blob(descriptor)

        def base_images() -> tuple[str, ...]:
            if made:
                return made[0]
            layered = layered_entry(ref.uri, digest, platform, self.settings)
            if layered is not None:
                layers = self._layered_base(resolved, layered, progress)
                if layers is not None:
                    fetched.append(True)  # by make_layered
                    made.append(layers)
                    return layers
            if not squashfs.exists():
                self._note(f"importing {ref.uri} for the build")
                fetched.append(True)  # by write_image
                try:
                    # the lowest folder of every step, read often, written once, only mounted
                    write_image(resolved, squashfs, mounted_only_plan(self.settings.max_processors),
                                progress=progress)
                except HydriaError:
                    if not squashfs.exists():  # else another build made it first
                        raise
            made.append((str(squashfs),))
            return made[0]

        made: list[tuple[str, ...]] = []
        image = StageImage(inner, platform, key_of("image", digest, str(platform)),
                           [LayerRef(d, diff, origin=ref.uri) for d, diff in zip(resolved.layers, diff_ids)],
                           list(config.get("history") or []), base_images, open_base_blob)
        self.pulled[f"{word} {platform}"] = image
        return image

    def _layered_base(self, resolved: mf.ResolvedImage, kept: CachedImage, progress: Progress) -> tuple[str, ...] | None:
        """The layer images of the registry image ``resolved``, the lowest first, kept in the
        image cache as a Slurm step's import keeps them (shared with them, and with this
        build's layered output); None where a layer cannot stand alone."""
        from hydria.image.importer import make_layered
        from hydria.image.squash.layer_image import LayerNeedsMerge
        from hydria.runtime.layered import layer_paths

        entry = kept.find()
        if entry is None:
            self._note(f"importing {resolved.uri} for the build, as layer images")
            try:
                entry = make_layered(resolved, kept, self.settings, progress)
            except LayerNeedsMerge as e:
                self._note(f"importing {resolved.uri} merged into one file: {e.message}")
                return None
        return tuple(layer_paths(str(entry))[:-1])  # the top one holds the runtime files, no layer's

    # --- instructions ----------------------------------------------------------------------------

    def _dispatch(self, instruction: Instruction, image: StageImage, position: str) -> None:
        keyword = instruction.keyword
        if keyword == "ARG":
            self._arg(instruction, image)
            image.record(instruction, empty=True)
        elif keyword in FILE_STEPS:
            self._file_step(instruction, image, position)
        else:
            what = apply_config(instruction, image, self.parsed.escape)
            image.key = key_of(image.key, keyword, what)
            image.record(instruction, empty=True)

    def _arg(self, instruction: Instruction, image: StageImage) -> None:
        for argument in instruction.arguments:
            name, equals, default = argument.partition("=")
            if name in self.options.build_args:
                image.args[name] = self.options.build_args[name]
                self.used_args.add(name)
            elif equals:
                image.args[name] = expand(default, image.variables, self.parsed.escape)
            elif name in self.global_args:
                image.args[name] = self.global_args[name]
            image.key = key_of(image.key, "ARG", name, image.args.get(name))

    def warn_unused_args(self) -> None:
        unused = sorted(set(self.options.build_args) - self.used_args - PROXY_ARGS)
        if unused:
            log.warning("--build-arg %s: no ARG of the stages built takes it", ", ".join(unused))

    def _file_step(self, instruction: Instruction, image: StageImage, position: str) -> None:
        self._show(f"[{position}] {instruction.text.splitlines()[0]}")
        started = time.monotonic()
        work = self.cache.work_folder()
        try:
            work.mkdir(mode=0o700)
            scratch = work / "scratch"
            scratch.mkdir()
            key, action = self._plan(instruction, image, str(scratch))
            hit, cached = (False, None) if self.options.no_cache else self.cache.step(key)
            if hit:
                self._add_layer(image, cached)
                image.key = key
                image.record(instruction, empty=cached is None)
                self.show(f"#{self.step_number} CACHED")
                return
            layer = self._run(instruction, image, action, work)
            self.cache.remember(key, layer, instruction.text)
            self._add_layer(image, layer)
            image.key = key
            image.record(instruction, empty=layer is None)
        finally:
            self.cache.clear_work([work])
        self.show(f"#{self.step_number} DONE {time.monotonic() - started:.1f}s")

    def _add_layer(self, image: StageImage, layer: Layer | None) -> None:
        if layer is not None:
            image.layers.append(LayerRef(mf.Descriptor(layer.digest, layer.size, mf.OCI_LAYER_GZIP), layer.diff_id,
                                         str(self.cache.tree(layer.diff_id))))

    def _run(self, instruction: Instruction, image: StageImage, action: sandbox.Action, work: Path) -> Layer | None:
        upper, overlay_work = work / "upper", work / "work"
        upper.mkdir()
        overlay_work.mkdir()
        base = image.base_images() if image.base_images is not None else ()
        ids = self.cache.idmap
        step = sandbox.StepRoot(tuple(image.trees()), base, str(upper), str(overlay_work), str(work / "scratch"), ids)
        status = sandbox.in_step(step, self.settings, action)
        if status != 0:
            command = instruction.text if len(instruction.text) < 300 else instruction.text[:300] + "..."
            raise BuildFailed(f"{instruction.where}: {command}: exited with status {status}",
                              hint="the steps before it are cached: fix it and build again")
        if is_empty(str(upper)):
            return None
        owners = {}
        owners_file = work / "scratch" / "owners.json"
        if owners_file.exists():
            owners = {path: (uid, gid) for path, (uid, gid) in json.loads(owners_file.read_text()).items()}
        blob = work / "blob"

        def write() -> dict[str, object]:
            with open(blob, "wb") as handle:
                return write_layer(str(upper), handle, owners, own_ids=ids is not None,
                                   processors=self.settings.max_processors)._asdict()

        written = write() if ids is None else ids.run(write)  # where only the mapping can read what the step made
        layer = Layer(**written)  # type: ignore[arg-type]
        self.cache.keep_layer(upper, blob, layer)
        return layer

    def _plan(self, instruction: Instruction, image: StageImage, scratch: str) -> tuple[str, sandbox.Action]:
        """The step's cache key and the action that does it in the mounted root."""
        keyword, escape = instruction.keyword, self.parsed.escape
        if keyword == "WORKDIR":
            path = resolve_path(image.workdir, expand(instruction.arguments[0], image.variables, escape))
            image.config["WorkingDir"] = path.rstrip("/") or "/"
            return key_of(image.key, "WORKDIR", path), _owners_action(lambda root: copying.make_folder(root, path))
        if keyword == "RUN":
            return self._plan_run(instruction, image, scratch)
        return self._plan_copy(instruction, image, scratch)

    def _plan_run(self, instruction: Instruction, image: StageImage, scratch: str) -> tuple[str, sandbox.Action]:
        network = instruction.flag("network") or "default"
        if network not in ("default", "host", "none"):
            raise instruction.error(f"--network={network}: not supported", hint="--network=default, host or none")
        if instruction.flag("security") not in (None, "sandbox"):
            raise instruction.error("--security=insecure is not supported", hint="a build step has no more rights than its user")
        argv, own_mounts = steps.run_argv(instruction, image, scratch)
        host = self.options.host
        sources = steps.MountSources(self.context.path, self.cache.mount_folder, host.secrets, scratch)
        mounts = steps.run_mounts(instruction, image.variables, self.parsed.escape, sources)
        environment = steps.run_environment(image, host.environment())
        user = str(image.config.get("User") or "")
        if user in ("root", "0", "0:0", "root:root"):
            user = ""
        if user and self.cache.idmap is None:
            log.warning("%s: USER %s: RUN runs as root (one user ID is mapped: the files it makes belong to "
                        "root in the image)", instruction.where, user)
        command = sandbox.Command(tuple(argv), {**environment, **steps.secret_variables(instruction, mounts, host.secrets)},
                                  image.workdir, network != "none",
                                  (*host.mounts(), *own_mounts, *steps.file_mounts(mounts)), user,
                                  "HOME" not in image.environment)
        key = key_of(image.key, "RUN", argv, steps.keyed_environment(environment), image.workdir, network,
                     steps.keyed_mounts(mounts))
        return key, sandbox.run_command(command)

    def _plan_copy(self, instruction: Instruction, image: StageImage, scratch: str) -> tuple[str, sandbox.Action]:
        keyword, escape, variables = instruction.keyword, self.parsed.escape, image.variables
        if instruction.flag("keep-git-dir") is not None:
            raise instruction.error("git sources are not supported yet", hint="clone in a RUN, or copy from the context")
        words = [expand(word, variables, escape) for word in instruction.arguments]
        destination = resolve_path(image.workdir, words[-1] if len(words) > 1 else words[0])
        sources = words[:-1]
        urls = [word for word in sources if download.is_url(word)]
        if urls:
            source_root, source_key = self._downloads(instruction, scratch, sources)
            mount = None
        else:
            if instruction.flag("checksum") is not None:
                raise instruction.error("--checksum is for URLs", hint="ADD --checksum=sha256:HEX URL DESTINATION")
            source_root, source_key, mount = self._source_root(instruction, image, scratch, sources)
        chmod = steps.parse_chmod(instruction, instruction.flag("chmod"))
        chown = instruction.flag("chown")
        chown = expand(chown, variables, escape) if chown is not None else None
        unpack = keyword == "ADD" and not urls  # a downloaded archive stays as it is, as in Docker

        def copy(root: str) -> dict[str, copying.Owner]:
            reading = source_root
            if mount is not None:
                path = sandbox.mount_layers(mount[0], mount[1], scratch, "from", self.settings)
                reading = source_root._replace(path=path)
            owner = copying.owner_of(root, chown) if chown else None
            return copying.copy(reading, sources, destination, root, chmod=chmod, owner=owner, unpack=unpack)

        key = key_of(image.key, keyword, source_key, sources, destination, chmod, chown)
        return key, _owners_action(copy)

    def _downloads(self, instruction: Instruction, scratch: str, sources: list[str]) -> tuple[copying.SourceRoot, str]:
        """``ADD URL...``: the files downloaded (``sources`` become their names), and their digest."""
        if instruction.keyword != "ADD":
            raise instruction.error("COPY takes no URLs", hint="ADD downloads a URL")
        if not all(download.is_url(word) for word in sources):
            raise instruction.error("URLs and local files in one ADD", hint="give them in separate ADD instructions")
        folder = os.path.join(scratch, "downloads")
        os.mkdir(folder)
        checksum = instruction.flag("checksum")
        for index, url in enumerate(sources):
            sources[index] = download.fetch(instruction, url, folder, checksum, self.settings)
        root = copying.SourceRoot(folder, "the downloads")
        return root, steps.sources_digest(root, sources)

    def _source_root(self, instruction: Instruction, image: StageImage, scratch: str, sources: list[str]
                     ) -> tuple[copying.SourceRoot, str, tuple[tuple[str, ...], tuple[str, ...]] | None]:
        """Where a COPY reads, the digest of what it reads, and the layers to mount for it
        (``--from``), if any."""
        source_from = instruction.flag("from")
        excludes = tuple(p for text in instruction.flags.get("exclude", []) for p in ignore.parse(text))
        heredocs = {f"<<{h.name}": h for h in instruction.heredocs}
        if heredocs:
            folder = os.path.join(scratch, "heredocs")
            os.mkdir(folder)
            for index, word in enumerate(sources):
                if word in heredocs:
                    name = f"heredoc{index}"
                    with open(os.path.join(folder, name), "w") as handle:
                        handle.write(heredocs[word].content)
                    sources[index] = name
            root = copying.SourceRoot(folder, "the Dockerfile's heredocs")
            return root, steps.sources_digest(root, sources), None
        if source_from is None:
            root = self.context._replace(patterns=self.context.patterns + excludes)
            return root, steps.sources_digest(root, sources), None
        name = expand(source_from, image.variables, self.parsed.escape)
        stage = self.parsed.stage(name)
        if stage is not None:
            if stage.number in self.building:
                raise instruction.error(f"--from={name}: the stage is being built (it copies from itself, "
                                        "or from a stage that copies from it)")
            source = self.build_stage(stage)
        else:
            source = self.pull(name, self.platform, instruction)
        base = source.base_images() if source.base_images is not None else ()
        root = copying.SourceRoot("", f"--from={name}", excludes)
        return root, key_of(source.key, sources), (tuple(source.trees()), base)

    # --- output ----------------------------------------------------------------------------------

    def _show(self, text: str) -> None:
        self.step_number += 1
        self.show(f"#{self.step_number} {text}")

    def _note(self, text: str) -> None:
        self.show(f"#{self.step_number} {text}")


def _owners_action(work: Callable[[str], Mapping[str, copying.Owner]]) -> sandbox.Action:
    """An action that does ``work`` on the root and leaves the owners it chose for the layer."""

    def action(root: str, step: sandbox.StepRoot) -> int:
        owners = work(root)
        if step.idmap is not None:  # the files get their owners (later steps see them), where mapped
            for path, owner in owners.items():
                try:
                    os.lchown(os.path.join(root, path), owner.uid, owner.gid)
                except OSError:
                    pass  # an ID the mapping lacks: the layer has it all the same
        with open(os.path.join(step.scratch, "owners.json"), "w") as handle:
            json.dump({path: [owner.uid, owner.gid] for path, owner in owners.items()}, handle)
        return 0

    return action

