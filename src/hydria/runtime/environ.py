"""The container's environment, built as enroot builds it. Pure.

Order (later wins): the image's ``/etc/environment``, ``environ.d/*.env`` (system, then user),
``TERM`` from the host, a configuration script's ``environ()``, then ``--env``; the hooks' variables
come over these as edits (runtime/edits.py), except ``--env``'s names. The host environment is never
inherited otherwise. Lines are normalised as enroot's ``envfmt`` does: blank lines, comments,
lines that are not ``NAME=...`` and every ``HYDRIA_*``/``ENROOT_*`` line are dropped, and one pair
of surrounding quotes is removed from the value.
"""

from __future__ import annotations

from hydria.errors import InvalidArgument
from hydria.record import TYPE_CHECKING
from hydria.runtime.fstab import substitute

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


def is_name(text: str) -> bool:
    """A shell variable name, ``[A-Za-z_][A-Za-z0-9_]*`` (without ``re``: see docs/runtime.md)."""
    return text.isascii() and text.isidentifier()


def parse_env_lines(text: str) -> list[tuple[str, str]]:
    """``NAME=value`` pairs of an environment file, normalised."""
    pairs = []
    for raw in text.splitlines():
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not is_name(name) or name.startswith(("HYDRIA_", "ENROOT_")):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        pairs.append((name, value))
    return pairs


def env_option(value: str, host: Mapping[str, str]) -> tuple[str, str]:
    """``--env NAME=VALUE`` verbatim, ``--env NAME`` copies the host's value. Raises HydriaError."""
    name, equals, rest = value.partition("=")
    if not is_name(name):
        raise InvalidArgument(value, hint="--env takes NAME=VALUE, or NAME for the host's value; a NAME is letters, "
                                          "digits and _, not starting with a digit")
    return name, rest if equals else host.get(name, "")


def build(image_environment: str, env_files: Iterable[str], options: Iterable[tuple[str, str]],
          host: Mapping[str, str], conf_output: str = "") -> dict[str, str]:
    """The container environment from its sources, lowest precedence first (``conf_output``: what
    a configuration script's ``environ()`` printed, taken as it is)."""
    result: dict[str, str] = {}
    for text in (image_environment, *env_files):
        result.update(parse_env_lines(substitute(text, host)))
    if "TERM" in host:
        result["TERM"] = host["TERM"]
    result.update(parse_env_lines(conf_output))
    result.update(options)
    return result
