"""Shell-style ``$VAR`` expansion for configuration values, without running a shell.

enroot passes every configuration value through ``eval echo``, which also runs command
substitutions. hydria expands variables (``$NAME``, ``${NAME}``, ``${NAME:-default}``) and a
leading ``~``; a ``$(command)`` runs only through the ``run`` the caller gives, which config.py
does for the system files that only root can write. An unknown variable is an error instead of
silently becoming empty, because an empty piece in a path (``/scratch//hydria``) is the kind of
mistake that is hard to find later.
"""

from __future__ import annotations

from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


# A scanner rather than a regular expression: every start expands the settings' defaults, and
# importing ``re`` would cost it several milliseconds (docs/runtime.md, start latency).
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARACTERS = _NAME_START | frozenset("0123456789")


class ExpansionError(ValueError):
    """A value refers to something that cannot be expanded."""


def expand(text: str, variables: Mapping[str, str], run: Callable[[str], str] | None = None) -> str:
    """Expand ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, a leading ``~``, and
    ``$(command)`` with ``run`` (which returns the command's output) where one is given.

    Raises:
        ExpansionError: an unset variable without a default, ``$(...)`` without ``run``, an
            unbalanced ``$(`` or a stray ``$``.
    """
    if text == "~" or text.startswith("~/"):
        text = _lookup("HOME", variables) + text[1:]
    pieces = []
    done = 0
    while (dollar := text.find("$", done)) >= 0:
        pieces.append(text[done:dollar])
        value, done = _reference(text, dollar + 1, variables, run)
        pieces.append(value)
    pieces.append(text[done:])
    return "".join(pieces)


def _reference(text: str, start: int, variables: Mapping[str, str],
               run: Callable[[str], str] | None) -> tuple[str, int]:
    """The value of the reference that follows the ``$`` before ``start``, and where it ends."""
    following = text[start:start + 1]
    if following in _NAME_START:
        end = name_end(text, start)
        return _value(text[start:end], None, "", variables), end
    if following == "{":
        end = name_end(text, start + 1)
        close = _closing_brace(text, end)
        operator = next((op for op in (":-", "-") if text.startswith(op, end)), None)
        if end > start + 1 and close >= 0 and (close == end or operator):
            word = text[end + len(operator):close] if operator else ""
            return _value(text[start + 1:end], operator, word, variables, run), close + 1
    if following == "(":
        if run is None:
            raise ExpansionError("command substitution $(...) runs only in system configuration files that "
                                 "only root can write; use variables such as $UID, $USER, $HOME, $HOSTNAME "
                                 "or ${XDG_CACHE_HOME}")
        close = _closing_parenthesis(text, start)
        return run(text[start + 1:close]).rstrip("\n"), close + 1
    if following == "$":
        return "$", start + 1
    raise ExpansionError(f"stray '$' in {text!r}; write $$ for a literal dollar sign")


def _closing_brace(text: str, start: int) -> int:
    """Where the ``${`` being read is closed, past nested ones (``${A:-${B}/x}``); -1: nowhere."""
    depth = 1
    for index in range(start, len(text)):
        if text.startswith("${", index):
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _closing_parenthesis(text: str, start: int) -> int:
    """Where the ``(`` at ``start`` is closed, skipping quoted text and nested parentheses."""
    depth, quote = 0, ""
    for index in range(start, len(text)):
        character = text[index]
        if quote:
            quote = "" if character == quote else quote
        elif character in "'\"":
            quote = character
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth == 0:
                return index
    raise ExpansionError(f"unbalanced $( in {text!r}")


def name_end(text: str, start: int) -> int:
    """Where the shell variable name that starts at ``start`` ends (``start``: none there)."""
    end = start
    if end < len(text) and text[end] in _NAME_START:
        while end < len(text) and text[end] in _NAME_CHARACTERS:
            end += 1
    return end


def _value(name: str, operator: str | None, word: str, variables: Mapping[str, str],
           run: Callable[[str], str] | None = None) -> str:
    value = variables.get(name)
    if operator == ":-" and not value or operator == "-" and value is None:
        return expand(word, variables, run)
    if value is None:
        raise ExpansionError(f"${name} is not set; set it, or give a default with ${{{name}:-VALUE}}")
    return value


def _lookup(name: str, variables: Mapping[str, str]) -> str:
    value = variables.get(name)
    if value is None:
        raise ExpansionError(f"${name} is not set")
    return value
