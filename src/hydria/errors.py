"""The exception tree. Core code raises these; only the CLI turns them into output and exit codes."""

from __future__ import annotations

import os

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


class HydriaError(Exception):
    """An error the user can act on: ``message`` says what is wrong, ``hint`` what to do."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(HydriaError):
    """A command line that does not parse (unknown option, wrong number of arguments)."""


class ConfigError(HydriaError):
    """A configuration file or ``HYDRIA_*`` variable holds something that is not a valid setting."""


class PathNotUsable(HydriaError):
    """A directory hydria needs cannot be created, written or trusted."""


class InvalidArgument(HydriaError):
    """A value given on the command line, or to the API, that hydria cannot take."""

    def __init__(self, value: object = "", *, hint: str | None = None) -> None:
        super().__init__(f"Invalid argument: {value}" if value != "" else "Invalid argument", hint=hint)


class InvalidImage(HydriaError):
    """A file or archive given as an image that is none hydria can use, or a damaged one."""

    def __init__(self, what: object, *, hint: str | None = None) -> None:
        super().__init__(f"Invalid image format: {what}", hint=hint)


class NotFound(HydriaError):
    """A file or directory the user named, or hydria needs, is not there."""

    def __init__(self, path: object, *, hint: str | None = None) -> None:
        super().__init__(f"No such file or directory: {path}", hint=hint)


class ContainerNotFound(NotFound):
    """The user named a container that is not there: named as typed, not by its folder."""

    def __init__(self, name: str, *, hint: str | None = None) -> None:
        HydriaError.__init__(self, f"No such container: {name}", hint=hint)


class MissingTool(HydriaError):
    """A program hydria runs is not installed, or not on ``PATH``."""

    def __init__(self, program: str, *, hint: str | None = None) -> None:
        super().__init__(f"Command not found: {program}", hint=hint)


class PermissionProblem(HydriaError):
    """A file or directory is there, but this user may not read or write it as needed."""

    def __init__(self, path: object, detail: str = "", *, hint: str | None = None) -> None:
        super().__init__(f"Permission denied: {path}" + (f" ({detail})" if detail else ""), hint=hint)


class AlreadyExists(HydriaError):
    """What would be written is there already (hydria never overwrites without --force)."""

    def __init__(self, path: object, *, hint: str | None = None) -> None:
        super().__init__(f"File already exists: {path}", hint=hint)


def did_you_mean(word: str, known: Iterable[str], where: str, *, cutoff: float = 0.6) -> str | None:
    """The one wording of every suggestion (a command, an option, a setting, a container, a
    file): ``did you mean NAME? (WHERE)``, WHERE saying how to see them all; None when none of
    ``known`` is close to ``word``."""
    from difflib import get_close_matches

    close = get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return f"did you mean {close[0]}? ({where})" if close else None


def missing_file(path: str, *, hint: str | None = None) -> NotFound:
    """The error for a file the user named that is not there: with the file of its folder that
    was probably meant (``ubunt.sqsh``: ``ubuntu.sqsh``), else ``hint``."""
    folder, name = os.path.split(os.path.abspath(path))
    try:
        names = [entry for entry in os.listdir(folder) if not entry.startswith(".")]
    except OSError:
        names = []
    # a shared suffix (.sqsh) makes any two names look alike: only a near miss is suggested
    meant = did_you_mean(name, names, f"ls {folder} shows the files there", cutoff=0.8)
    return NotFound(os.path.join(folder, name), hint=meant or hint)
