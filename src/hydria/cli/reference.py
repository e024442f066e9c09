"""``hydria reference bash-completion`` and ``hydria reference man [--output DIR]``: the bash
completion script and the man pages, made from the command line's own parsers, so that they say
what the commands take (an administrator installs them: docs/install.md)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date

from hydria.version import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("bash-completion", "man"))
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="man: write hydria.1 and hydria-COMMAND.1 there (made if missing) instead of printing hydria.1")


def run(options: argparse.Namespace) -> int:
    from hydria.errors import UsageError

    if options.what == "bash-completion":
        if options.output:
            raise UsageError("--output is for man pages; redirect the completion script instead")
        sys.stdout.write(bash_completion())
        return 0
    pages = man_pages()
    if not options.output:
        sys.stdout.write(pages["hydria.1"])
        return 0
    os.makedirs(options.output, exist_ok=True)  # as install -d: /usr/local/share/man/man1 may not be there yet
    for name, text in pages.items():
        with open(os.path.join(options.output, name), "w") as handle:
            handle.write(text)
    print(f"wrote {len(pages)} man pages to {options.output}")
    return 0


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's optional arguments (argparse has no public way to list them)."""
    return [action for action in parser._actions if action.option_strings and action.help != argparse.SUPPRESS]


def _positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if not action.option_strings and action.help != argparse.SUPPRESS]


def bash_completion() -> str:
    """A bash script that completes hydria's (and an ``enroot`` link's) commands and options, and
    file names after them."""
    from hydria.cli.commands import COMMANDS, build_parser

    cases = []
    for command in COMMANDS:
        parser = build_parser(command)
        words = [flag for action in _options(parser) for flag in action.option_strings]
        choices = [str(c) for action in _positionals(parser) if action.choices for c in action.choices]
        cases.append(f'        {command.name}) words="{" ".join(words + choices)}" ;;')
    names = " ".join(command.name for command in COMMANDS)
    return f"""# bash completion for hydria {__version__} (hydria reference bash-completion)
_hydria() {{
    local current=${{COMP_WORDS[COMP_CWORD]}} words
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "{names} help" -- "$current"))
        return
    fi
    case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
        *) words="" ;;
    esac
    if [[ "$current" == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$current"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$current") $(compgen -f -- "$current"))
    fi
}}
complete -o filenames -F _hydria hydria enroot
"""


def man_pages() -> dict[str, str]:
    """``hydria.1`` (the commands) and one ``hydria-COMMAND.1`` per command, in roff."""
    from hydria.cli.commands import COMMANDS, build_parser

    today = date.today().isoformat()
    overview = [_header("hydria", "1", today), ".SH NAME", "hydria \\- unprivileged containers for HPC and AI clusters",
                ".SH SYNOPSIS", ".B hydria", "\\fICOMMAND\\fR [\\fIARG\\fR...]", ".SH COMMANDS"]
    pages = {}
    for command in COMMANDS:
        overview += [".TP", f".B {command.name}", _escape(command.summary), f"See \\fBhydria-{command.name}\\fR(1)."]
        pages[f"hydria-{command.name}.1"] = _command_page(command.name, command.summary, build_parser(command), today)
    overview += [".SH SEE ALSO", "The documentation in the docs/ folder of hydria's source."]
    return {"hydria.1": "\n".join(overview) + "\n", **pages}


def _command_page(name: str, summary: str, parser: argparse.ArgumentParser, today: str) -> str:
    lines = [_header(f"hydria-{name}", "1", today), ".SH NAME", f"hydria-{name} \\- {_escape(summary)}",
             ".SH SYNOPSIS", _escape(parser.format_usage().removeprefix("usage: ").strip()), ".SH OPTIONS"]
    for action in [*_positionals(parser), *_options(parser)]:
        flags = ", ".join(action.option_strings) or (action.metavar or action.dest)
        value = f" {action.metavar or action.dest.upper()}" if action.option_strings and action.nargs != 0 else ""
        lines += [".TP", f".B {_escape(str(flags))}{_escape(str(value))}", _escape(action.help or "")]
    lines += [".SH EXAMPLE", ".nf", _escape(getattr(parser, "example", "")), ".fi"]
    return "\n".join(lines) + "\n"


def _header(title: str, section: str, today: str) -> str:
    return f'.TH "{title.upper()}" "{section}" "{today}" "hydria {__version__}" "User Commands"'


def _escape(text: str) -> str:
    """roff: backslashes doubled, a leading dot or quote kept from being read as a request."""
    text = text.replace("\\", "\\\\").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text
