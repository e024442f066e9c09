"""``hydria start`` without argparse: the container start is the command run most often (every
job, every Slurm step that starts one), and argparse's imports alone would cost
it a good part of its budget (docs/runtime.md, start latency).

Only plain command lines are parsed here: known options in their exact forms (``-e VAL``,
``--env VAL``, ``--env=VAL``, the flags), then the target and the command. Anything else (help,
an unknown or abbreviated option, combined short flags, a missing or empty value, ``--``) returns
None, and the full command line of :mod:`hydria.cli.commands` handles it, with its usage and
errors, so that both paths behave the same.
"""

from __future__ import annotations

from types import SimpleNamespace

from hydria.container.options import FLAGS, REPEATED, VALUED, defaults
from hydria.record import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


def parse(args: Sequence[str]) -> SimpleNamespace | None:
    """The options as ``hydria start``'s argparse would give them, or None when not plain."""
    options = defaults()
    index = 0
    while index < len(args) and args[index].startswith("-"):
        word = args[index]
        name, equals, value = word.partition("=")
        if word in FLAGS:
            setattr(options, FLAGS[word], True)
            index += 1
            continue
        if name.startswith("--") and equals and name in VALUED and value:
            index += 1
        elif word in VALUED and index + 1 < len(args) and args[index + 1] and not args[index + 1].startswith("-"):
            name, value = word, args[index + 1]
            index += 2
        else:
            return None
        if VALUED[name] in REPEATED:
            getattr(options, VALUED[name]).append(value)
        else:
            setattr(options, VALUED[name], value)
    if index >= len(args) or not args[index]:
        return None
    options.target, options.command = args[index], list(args[index + 1:])
    return options


def run(args: Sequence[str]) -> int | None:
    """Start the container (this process becomes its program), or None to use the full command line."""
    options = parse(args)
    if options is None:
        return None
    from hydria.cli.logsetup import guarded, setup_logging

    setup_logging()

    def action() -> int:
        from hydria.cli import start
        from hydria.config import load_settings

        return start.run(options, load_settings())  # type: ignore[arg-type]

    return guarded(action)
