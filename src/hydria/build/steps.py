"""What ``RUN``, ``COPY`` and ``ADD`` mean, before they run: the command of a ``RUN`` (shell and
exec forms, ``SHELL``, heredocs, ``--mount``, ``--network``) and its environment, the sources of
a ``COPY``/``ADD`` and the digest of what they read, which goes into the step's cache key.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hydria.build.copying import SourceRoot, listing, matches
from hydria.build.dockerfile import Instruction
from hydria.build.sandbox import RunMount
from hydria.build.state import DEFAULT_PATH, PROXY_ARGS, StageImage
from hydria.build.words import expand
from hydria.runtime.mounts import resolve_in_root

SCRIPT_TARGET = "/.hydria-build-script"


def run_environment(image: StageImage, proxies: Mapping[str, str]) -> dict[str, str]:
    """A ``RUN``'s environment: its ARGs, the proxy arguments given, then ENV (which wins), with
    Docker's default ``PATH`` where the image sets none."""
    return {"PATH": DEFAULT_PATH, "HOME": "/root", **image.args, **proxies, **image.environment}


def keyed_environment(environment: Mapping[str, str]) -> list[tuple[str, str]]:
    """The environment as it goes into a cache key: without the proxy arguments (as Docker)."""
    return sorted((k, v) for k, v in environment.items() if k not in PROXY_ARGS)


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


def run_mounts(instruction: Instruction, variables: Mapping[str, str], escape: str, context: str,
               cache_folder: Callable[[str], Path]) -> list[RunMount]:
    """``RUN --mount=type=cache|bind|tmpfs,...``: the cache folders are the user's own, kept in
    the build cache; a bind mount takes a path of the build context, read-only."""
    mounts = []
    for text in instruction.flags.get("mount", []):
        fields: dict[str, str] = {}
        for part in expand(text, variables, escape).split(","):
            name, equals, value = part.partition("=")
            fields[name.strip().lower()] = value if equals else "true"
        kind = fields.pop("type", "bind")
        if kind not in ("cache", "tmpfs", "bind"):
            raise instruction.error(f"--mount type={kind} is not supported",
                                    hint="hydria build mounts type=cache, type=bind and type=tmpfs")
        target = fields.pop("target", fields.pop("dst", fields.pop("destination", "")))
        if not target:
            raise instruction.error(f"--mount={text}: no target", hint="e.g. --mount=type=cache,target=/root/.cache")
        writable = fields.pop("rw", fields.pop("readwrite", "false")) == "true"
        if kind == "cache":
            name = fields.pop("id", target)
            mounts.append(RunMount("cache", target, str(cache_folder(name)), True))
        elif kind == "tmpfs":
            mounts.append(RunMount("tmpfs", target))
        elif kind == "bind":
            if "from" in fields:
                raise instruction.error(f"--mount={text}: from= is not supported yet",
                                        hint="copy what the step needs from the stage with COPY --from")
            source = fields.pop("source", fields.pop("src", "."))
            host = resolve_in_root(context, os.path.normpath("/" + source))  # as COPY's: ../x is x
            if not os.path.exists(host):
                raise instruction.error(f"--mount={text}: {source} is not in the build context")
            if writable:
                raise instruction.error(f"--mount={text}: writable bind mounts are not supported",
                                        hint="a bind mount of the build context is read-only")
            mounts.append(RunMount("bind", target, host))
    return mounts


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
