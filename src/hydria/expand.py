"""Shell-style ``$VAR`` expansion for configuration values, without running a shell.

enroot passes every configuration value through ``eval echo``, which also runs command
substitutions. hydria expands only variables (``$NAME``, ``${NAME}``, ``${NAME:-default}``) and a
leading ``~``, so a configuration file can never run a program; an unknown variable is an error
instead of silently becoming empty, because an empty piece in a path (``/scratch//hydria``) is the
kind of mistake that is hard to find later.
"""

from __future__ import annotations

from collections.abc import Mapping

# A scanner rather than a regular expression: every start expands the settings' defaults, and
# importing ``re`` would cost it ~8 ms (see docs/runtime.md).
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARACTERS = _NAME_START | frozenset("0123456789")


class ExpansionError(ValueError):
    """A value refers to something that cannot be expanded."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}`` and a leading ``~``.

    Raises:
        ExpansionError: an unset variable without a default, ``$(...)`` or a stray ``$``.
    """
    if text == "~" or text.startswith("~/"):
        text = _lookup("HOME", variables) + text[1:]
    pieces = []
    done = 0
    while (dollar := text.find("$", done)) >= 0:
        pieces.append(text[done:dollar])
        value, done = _reference(text, dollar + 1, variables)
        pieces.append(value)
    pieces.append(text[done:])
    return "".join(pieces)


def _reference(text: str, start: int, variables: Mapping[str, str]) -> tuple[str, int]:
    """The value of the reference that follows the ``$`` before ``start``, and where it ends."""
    following = text[start:start + 1]
    if following in _NAME_START:
        end = name_end(text, start)
        return _value(text[start:end], None, "", variables), end
    if following == "{":
        end = name_end(text, start + 1)
        close = text.find("}", end)
        operator = next((op for op in (":-", "-") if text.startswith(op, end)), None)
        if end > start + 1 and close >= 0 and (close == end or operator):
            word = text[end + len(operator):close] if operator else ""
            return _value(text[start + 1:end], operator, word, variables), close + 1
    if following == "(":
        raise ExpansionError("command substitution $(...) is not supported; use variables such as "
                             "$UID, $USER, $HOME, $HOSTNAME or ${XDG_CACHE_HOME}")
    if following == "$":
        return "$", start + 1
    raise ExpansionError(f"stray '$' in {text!r}; write $$ for a literal dollar sign")


def name_end(text: str, start: int) -> int:
    """Where the shell variable name that starts at ``start`` ends (``start``: none there)."""
    end = start
    if end < len(text) and text[end] in _NAME_START:
        while end < len(text) and text[end] in _NAME_CHARACTERS:
            end += 1
    return end


def _value(name: str, operator: str | None, word: str, variables: Mapping[str, str]) -> str:
    value = variables.get(name)
    if operator == ":-" and not value or operator == "-" and value is None:
        return expand(word, variables)
    if value is None:
        raise ExpansionError(f"${name} is not set; set it, or give a default with ${{{name}:-VALUE}}")
    return value


def _lookup(name: str, variables: Mapping[str, str]) -> str:
    value = variables.get(name)
    if value is None:
        raise ExpansionError(f"${name} is not set")
    return value
