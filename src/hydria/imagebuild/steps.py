"""What ``RUN``, ``COPY`` and ``ADD`` mean, before they run: the command of a ``RUN`` (shell and
exec forms, ``SHELL``, heredocs, ``--mount``, ``--network``), its environment and mounts, the sources of
a ``COPY``/``ADD`` and the digest of what they read, which goes into the step's cache key.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hydria.imagebuild.copying import SourceRoot, listing, matches
from hydria.imagebuild.dockerfile import Instruction
from hydria.imagebuild.host_inputs import UNKEYED, Secret
from hydria.imagebuild.sandbox import RunMount
from hydria.imagebuild.state import DEFAULT_PATH, StageImage
from hydria.imagebuild.words import expand
from hydria.log import Logger
from hydria.record import Record
from hydria.runtime.mounts import resolve_in_root

log = Logger(__name__)

SCRIPT_TARGET = "/.hydria-build-script"


def run_environment(image: StageImage, host: Mapping[str, str]) -> dict[str, str]:
    """A ``RUN``'s environment: its ARGs, what the host gives every step (proxies, the CA
    bundle's variables: host_inputs.py), then ENV (which wins), with Docker's default ``PATH``
    where the image sets none."""
    return {"PATH": DEFAULT_PATH, "HOME": "/root", **image.args, **host, **image.environment}


def keyed_environment(environment: Mapping[str, str]) -> list[tuple[str, str]]:
    """The environment as it goes into a cache key: without the proxy arguments (as Docker) and
    the CA bundle's variables."""
    return sorted((k, v) for k, v in environment.items() if k not in UNKEYED)


def keyed_mounts(mounts: Sequence[RunMount]) -> list[tuple[object, ...]]:
    """A ``RUN``'s mounts as they go into its cache key: a cache folder by its place and use, a
    secret by its id and place (never its content, as BuildKit), others whole."""
    return [(m.target, m.writable, m.sharing) if m.kind == "cache" else
            (m.kind, m.target, m.options) if m.kind == "secret" else tuple(m) for m in mounts]


def run_argv(instruction: Instruction, image: StageImage, scratch: str) -> tuple[list[str], list[RunMount]]:
    """The command of a ``RUN`` and the mounts it needs for itself (a heredoc script)."""
    if instruction.exec_form:
        return list(instruction.arguments), []
    text = " ".join(instruction.arguments)
    heredocs = instruction.heredocs
    if heredocs and len(heredocs) == 1 and text.strip() in (f"<<{heredocs[0].name}", f"<<-{heredocs[0].name}",
                                                            f"<<'{heredocs[0].name}'", f'<<"{heredocs[0].name}"'):
        content = heredocs[0].content
        if content.startswith("#!"):  # run with its own interpreter, as a file
            script = os.path.join(scratch, "script")
            with open(script, "w") as handle:
                handle.write(content)
            os.chmod(script, 0o755)
            return [SCRIPT_TARGET], [RunMount("bind", SCRIPT_TARGET, script)]
        return [*image.shell, content], []
    for heredoc in heredocs:  # the shell reads them itself
        text += f"\n{heredoc.content}{heredoc.name}"
    return [*image.shell, text], []


# What each type of RUN --mount takes (BuildKit's names and their other spellings); any other
# field is an error, never ignored.
MOUNT_FIELDS = {"cache": {"target", "id", "readonly", "sharing", "mode", "uid", "gid"},
                "bind": {"target", "source", "readonly", "readwrite", "from"},
                "tmpfs": {"target", "size"},
                "secret": {"id", "target", "required", "mode", "uid", "gid", "env"}}
MOUNT_SPELLINGS = {"dst": "target", "destination": "target", "src": "source", "ro": "readonly", "rw": "readwrite"}
SHARING = ("shared", "private", "locked")


class MountSources(Record):
    """Where a ``RUN --mount`` finds its source: the build context, the build cache's folders,
    the secrets given (``--secret``), and the step's scratch folder (its secrets' copies)."""

    context: str
    cache_folder: Callable[[str], Path]
    secrets: Mapping[str, Secret]
    scratch: str


def run_mounts(instruction: Instruction, variables: Mapping[str, str], escape: str,
               sources: MountSources) -> list[RunMount]:
    """``RUN --mount=type=cache|bind|tmpfs|secret,...``: the cache folders are the user's own,
    kept in the build cache; a bind mount takes a path of the build context, read-only; a secret
    is a copy of the one given, for this step alone."""
    found = [_run_mount(instruction, expand(text, variables, escape), sources)
             for text in instruction.flags.get("mount", [])]
    return [mount for mount in found if mount is not None]


def _run_mount(instruction: Instruction, text: str, sources: MountSources) -> RunMount | None:
    fields: dict[str, str] = {}
    for part in text.split(","):
        name, equals, value = part.partition("=")
        name = name.strip().lower()
        fields[MOUNT_SPELLINGS.get(name, name)] = value if equals else "true"
    kind = fields.pop("type", "bind")
    if kind not in MOUNT_FIELDS:
        raise instruction.error(f"--mount type={kind} is not supported",
                                hint="hydria build mounts type=cache, type=bind, type=tmpfs and type=secret")
    unknown = sorted(set(fields) - MOUNT_FIELDS[kind])
    if unknown:
        raise instruction.error(f"--mount={text}: type={kind} takes no {unknown[0]}=",
                                hint=f"it takes {', '.join(sorted(MOUNT_FIELDS[kind]))}")
    if kind == "secret":
        return _secret_mount(instruction, text, fields, sources)
    target = fields.get("target", "")
    if not target:
        raise instruction.error(f"--mount={text}: no target", hint="e.g. --mount=type=cache,target=/root/.cache")
    readonly = _flag(instruction, text, fields, "readonly")
    if kind == "tmpfs":
        size = fields.get("size")
        if size is not None and not re.fullmatch(r"[0-9]+[kKmMgG]?", size):
            raise instruction.error(f"--mount={text}: size={size} is not a size", hint="e.g. size=64m")
        return RunMount("tmpfs", target, options=(f"size={size}",) if size else ())
    if kind == "cache":
        return _cache_mount(instruction, text, fields, readonly, sources.cache_folder)
    if "from" in fields:
        raise instruction.error(f"--mount={text}: from= is not supported yet",
                                hint="copy what the step needs from the stage with COPY --from")
    if _flag(instruction, text, fields, "readwrite"):
        raise instruction.error(f"--mount={text}: writable bind mounts are not supported",
                                hint="a bind mount of the build context is read-only")
    source = fields.get("source", ".")
    host = resolve_in_root(sources.context, os.path.normpath("/" + source))  # as COPY's: ../x is x
    if not os.path.exists(host):
        raise instruction.error(f"--mount={text}: {source} is not in the build context")
    return RunMount("bind", target, host)


def _secret_mount(instruction: Instruction, text: str, fields: Mapping[str, str],
                  sources: MountSources) -> RunMount | None:
    """BuildKit's secret mount: the secret ``id`` (default: the target's name) at ``target``
    (default: ``/run/secrets/ID`` unless ``env`` names a variable that gets its value instead),
    mode 0400, and in variable ``env``; None where it was not given and is not ``required`` (the
    step runs without it, as BuildKit's). The returned mount's options: id, mode, variable."""
    variable = fields.get("env", "")
    if "env" in fields and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
        raise instruction.error(f"--mount={text}: env={variable} is not a variable's name", hint="e.g. env=API_TOKEN")
    name = fields.get("id") or os.path.basename(fields.get("target", "").rstrip("/"))
    if not name:
        raise instruction.error(f"--mount={text}: no id", hint="e.g. --mount=type=secret,id=netrc")
    target = fields.get("target") or ("" if variable else f"/run/secrets/{name}")
    mode = _mode_of_root(instruction, text, fields, "secret", "0400")
    secret = sources.secrets.get(name)
    if secret is None:
        if _flag(instruction, text, fields, "required"):
            raise instruction.error(f"--mount={text}: the secret {name} was not given",
                                    hint=f"hydria build --secret id={name},src=FILE ...")
        log.info("%s: the secret %s was not given (--secret id=%s,...): the step runs without %s",
                 instruction.where, name, name, target or f"${variable}")
        return None
    copy = None
    if target:
        folder = os.path.join(sources.scratch, "secrets")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        copy = os.path.join(folder, str(len(os.listdir(folder))))
        secret.write(copy, mode & 0o7777)
    return RunMount("secret", target, copy, options=(name, f"{mode:o}", variable))


def secret_variables(instruction: Instruction, mounts: Sequence[RunMount],
                     secrets: Mapping[str, Secret]) -> dict[str, str]:
    """The variables that a ``RUN``'s secret mounts with ``env=`` give its command: the secrets'
    values (never in the image's config nor the cache key), each read once. Raises the
    instruction's error for a secret that holds a NUL byte, which no variable can."""
    variables = {}
    for mount in mounts:
        name, _, variable = mount.options if mount.kind == "secret" else ("", "", "")
        if not variable:
            continue
        value = secrets[name].content()
        if b"\0" in value:
            raise instruction.error(f"--mount=type=secret,id={name},env={variable}: the secret {name} holds a "
                                    "NUL byte, which no variable can", hint="give it as a file: leave env= out and read target=")
        variables[variable] = os.fsdecode(value)
    return variables


def file_mounts(mounts: Sequence[RunMount]) -> list[RunMount]:
    """The mounts a ``RUN``'s sandbox makes: all but a secret given only as a variable."""
    return [m for m in mounts if m.target]


def _mode_of_root(instruction: Instruction, text: str, fields: Mapping[str, str], what: str, default: str) -> int:
    """A mount's ``mode=`` (octal, ``default`` where none), for a ``what`` that belongs to root:
    ``uid``/``gid`` other than 0 are refused, as one user ID may be all that is mapped."""
    for owner in ("uid", "gid"):
        if fields.get(owner, "0") != "0":
            raise instruction.error(f"--mount={text}: {owner}={fields[owner]}: with one user ID mapped, the "
                                    f"{what} belongs to root", hint=f"leave {owner}= out (docs/build.md)")
    try:
        return int(fields.get("mode", default), 8)
    except ValueError:
        raise instruction.error(f"--mount={text}: mode={fields['mode']} is not octal", hint=f"e.g. mode={default}") from None


def _cache_mount(instruction: Instruction, text: str, fields: Mapping[str, str], readonly: bool,
                 cache_folder: Callable[[str], Path]) -> RunMount:
    sharing = fields.get("sharing", "shared")
    if sharing not in SHARING:
        raise instruction.error(f"--mount={text}: sharing={sharing}", hint="sharing=shared, private or locked")
    mode = _mode_of_root(instruction, text, fields, "cache folder", "0755")
    folder = cache_folder(fields.get("id", fields["target"]))
    os.chmod(folder, mode & 0o7777)
    return RunMount("cache", fields["target"], str(folder), not readonly, sharing)


def _flag(instruction: Instruction, text: str, fields: Mapping[str, str], name: str) -> bool:
    value = fields.get(name, "false").lower()
    if value not in ("true", "false"):
        raise instruction.error(f"--mount={text}: {name}={value} is not true or false")
    return value == "true"


def walk(source_root: SourceRoot, sources: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Every path a copy of ``sources`` reads: (relative path, host path), excluded ones left out."""
    for source in sources:
        for relative in matches(source_root, source):
            host = resolve_in_root(source_root.path, relative)
            yield relative, host
            if os.path.isdir(host):
                yield from _inside(source_root, host, relative)


def _inside(source_root: SourceRoot, folder: str, relative: str) -> Iterator[tuple[str, str]]:
    """What a copy reads inside ``folder``, in the copy's order, without recursion."""
    pending = [(folder, relative)]
    while pending:
        current, inner = pending.pop()
        for met in listing(source_root, current, inner):
            if not met.excluded:
                yield met.path, met.entry.path
            if met.descend:
                pending.append((met.entry.path, met.path))


def sources_digest(source_root: SourceRoot, sources: Sequence[str]) -> str:
    """The digest of what a copy reads: names, types, modes, link targets and contents."""
    total = hashlib.sha256()
    for relative, host in walk(source_root, sources):
        info = os.lstat(host)
        total.update(f"{relative}\0{info.st_mode:o}\0".encode())
        if stat.S_ISLNK(info.st_mode):
            total.update(os.readlink(host).encode())
        elif stat.S_ISREG(info.st_mode):
            with open(host, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    total.update(chunk)
        total.update(b"\0")
    return total.hexdigest()


def parse_chmod(instruction: Instruction, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        raise instruction.error(f"--chmod={text}: not an octal mode", hint="e.g. --chmod=755")
    return mode
