"""Variable substitution in Dockerfile words, as Docker's builder does it after parsing.

The parser (BuildKit's, through the ``dockerfile`` package) leaves quotes and ``$`` in the words;
the builder then expands them in the instructions that allow it (``ADD``, ``COPY``, ``ENV``,
``EXPOSE``, ``FROM``, ``LABEL``, ``STOPSIGNAL``, ``USER``, ``VOLUME``, ``WORKDIR``, ``ARG`` and
their flags), never in ``RUN``, ``CMD`` or ``ENTRYPOINT``, whose shell does it. The rules are
BuildKit's lexer's:

* ``'...'`` is literal; in ``"..."`` variables expand and the escape character escapes only
  ``"``, ``$`` and itself; outside quotes the escape character takes the next character literally;
* ``$NAME``, ``${NAME}``, ``${NAME:-WORD}`` / ``${NAME-WORD}`` (a default when unset or empty /
  unset), ``${NAME:+WORD}`` / ``${NAME+WORD}`` (WORD when set and not empty / set),
  ``${NAME:?MESSAGE}`` / ``${NAME?MESSAGE}`` (an error when unset or empty / unset);
* a ``$`` before anything else is a literal ``$``; an unset variable expands to nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from hydria.errors import HydriaError

NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class SubstitutionError(HydriaError):
    """A ``${...}`` that is malformed, or a ``${NAME?message}`` whose variable is unset."""


class _Scanner:
    def __init__(self, text: str, variables: Mapping[str, str], escape: str) -> None:
        self.text = text
        self.at = 0
        self.variables = variables
        self.escape = escape

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def next(self) -> str:
        character = self.peek()
        self.at += 1 if character else 0
        return character


def expand(word: str, variables: Mapping[str, str], escape: str = "\\") -> str:
    """``word`` with its variables expanded and its quotes and escapes removed.

    Raises:
        SubstitutionError: a malformed ``${...}``, or ``${NAME?message}`` with NAME unset.
    """
    return "".join(_words(_Scanner(word, variables, escape), split=False)) if word else ""


def expand_words(text: str, variables: Mapping[str, str], escape: str = "\\") -> list[str]:
    """``text`` expanded and split at whitespace outside quotes (as BuildKit's ``ProcessWords``)."""
    return _words(_Scanner(text, variables, escape), split=True)


def _words(scanner: _Scanner, *, split: bool) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    started = False  # a word was begun (an empty "" is a word)
    while (character := scanner.next()) != "":
        if split and character in " \t\n":
            if started:
                words.append("".join(current))
                current, started = [], False
            continue
        started = True
        current.append(_piece(scanner, character))
    if started or not split:
        words.append("".join(current))
    return words


def _piece(scanner: _Scanner, character: str) -> str:
    """What ``character``, read outside double quotes, stands for (with what follows it)."""
    if character == "'":
        return _single_quoted(scanner)
    if character == '"':
        return _double_quoted(scanner)
    if character == "$":
        return _variable(scanner)
    if character == scanner.escape:
        return scanner.next()
    return character


def _single_quoted(scanner: _Scanner) -> str:
    end = scanner.text.find("'", scanner.at)
    if end < 0:
        raise SubstitutionError(f"unmatched ' in {scanner.text!r}", hint="close the quote")
    value = scanner.text[scanner.at:end]
    scanner.at = end + 1
    return value


def _double_quoted(scanner: _Scanner) -> str:
    out: list[str] = []
    while True:
        character = scanner.next()
        if character == "":
            raise SubstitutionError(f'unmatched " in {scanner.text!r}', hint="close the quote")
        if character == '"':
            return "".join(out)
        if character == "$":
            out.append(_variable(scanner))
        elif character == scanner.escape and scanner.peek() in ('"', "$", scanner.escape) and scanner.peek():
            out.append(scanner.next())
        else:
            out.append(character)


def _name(scanner: _Scanner) -> str:
    start = scanner.at
    while scanner.peek() and scanner.peek() in NAME_CHARACTERS:
        scanner.at += 1
    return scanner.text[start:scanner.at]


def _variable(scanner: _Scanner) -> str:
    """After a ``$``: the value of ``NAME`` or ``{...}``, or a literal ``$``."""
    if scanner.peek() != "{":
        name = _name(scanner)
        return scanner.variables.get(name, "") if name else "$"
    scanner.next()
    name = _name(scanner)
    if not name:
        raise SubstitutionError(f"bad substitution in {scanner.text!r}: ${{ without a variable name",
                                hint="write ${NAME}, or \\$ for a literal dollar sign")
    operator = scanner.next()
    if operator == "":
        raise SubstitutionError(f"missing }} in {scanner.text!r}", hint="close the ${...}")
    if operator == "}":
        return scanner.variables.get(name, "")
    colon = operator == ":"
    if colon:
        operator = scanner.next()
    if operator not in ("-", "+", "?"):
        raise SubstitutionError(f"bad substitution in {scanner.text!r}: ${{{name}{':' if colon else ''}{operator}",
                                hint="the forms are ${NAME}, ${NAME:-default}, ${NAME:+alternative}, "
                                     "${NAME:?message}, also without the colon")
    word = _until_brace(scanner)
    value = scanner.variables.get(name)
    present = value is not None and (value != "" or not colon)
    if operator == "-":
        return value if present and value is not None else word
    if operator == "+":
        return word if present else ""
    if not present:
        raise SubstitutionError(f"{name}: {word or 'is not set'}",
                                hint=f"give it with --build-arg {name}=VALUE, or an ARG or ENV before this line")
    return value or ""


def _until_brace(scanner: _Scanner) -> str:
    """The word of ``${NAME:-WORD}`` up to its closing brace, itself expanded."""
    out: list[str] = []
    while True:
        character = scanner.next()
        if character == "":
            raise SubstitutionError(f"missing }} in {scanner.text!r}", hint="close the ${...}")
        if character == "}":
            return "".join(out)
        out.append(_piece(scanner, character))
