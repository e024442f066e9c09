"""Shell-style ``$VAR`` expansion for configuration values, without running a shell.

enroot passes every configuration value through ``eval echo``, which also runs command
substitutions. hydria expands only variables (``$NAME``, ``${NAME}``, ``${NAME:-default}``) and a
leading ``~``, so a configuration file can never run a program; an unknown variable is an error
instead of silently becoming empty, because an empty piece in a path (``/scratch//hydria``) is the
kind of mistake that is hard to find later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(
    rf"\$(?:(?P<bare>{_NAME})|\{{(?P<braced>{_NAME})(?:(?P<op>:?-)(?P<word>[^}}]*))?\}}|(?P<other>.?))"
)


class ExpansionError(ValueError):
    """A value refers to something that cannot be expanded."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}`` and a leading ``~``.

    Raises:
        ExpansionError: an unset variable without a default, ``$(...)`` or a stray ``$``.
    """
    if text == "~" or text.startswith("~/"):
        text = _lookup("HOME", variables) + text[1:]

    def substitute(match: re.Match[str]) -> str:
        name = match["bare"] or match["braced"]
        if name is None:
            if match["other"] == "(":
                raise ExpansionError(
                    "command substitution $(...) is not supported; use variables such as "
                    "$UID, $USER, $HOME, $HOSTNAME or ${XDG_CACHE_HOME}"
                )
            if match["other"] == "$":
                return "$"
            raise ExpansionError(f"stray '$' in {text!r}; write $$ for a literal dollar sign")
        value = variables.get(name)
        op = match["op"]
        if op == ":-" and not value or op == "-" and value is None:
            return expand(match["word"], variables)
        if value is None:
            raise ExpansionError(
                f"${name} is not set; set it, or give a default with ${{{name}:-VALUE}}"
            )
        return value

    return _TOKEN.sub(substitute, text)


def _lookup(name: str, variables: Mapping[str, str]) -> str:
    value = variables.get(name)
    if value is None:
        raise ExpansionError(f"${name} is not set")
    return value
