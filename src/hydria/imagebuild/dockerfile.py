"""A Dockerfile read as Docker's own builder reads it: BuildKit's parser (through the ``dockerfile``
package, which wraps its Go code) finds the instructions, continuations, heredocs and parser
directives; this module checks each instruction's form and flags, as BuildKit's dispatcher does,
and groups the instructions into stages. Errors name the file, the line and the instruction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydria.digits import is_number
from hydria.errors import HydriaError, missing_file
from hydria.paths import open_binary
from hydria.record import Record

MAX_SIZE = 4 << 20  # a Dockerfile is text; refuse to parse a huge file

# Flags each instruction takes (``--name=value``); a flag of another instruction is an error.
FLAGS: dict[str, frozenset[str]] = {
    "FROM": frozenset({"platform"}),
    "RUN": frozenset({"mount", "network", "security"}),
    "COPY": frozenset({"from", "chown", "chmod", "link", "exclude"}),
    "ADD": frozenset({"chown", "chmod", "checksum", "link", "keep-git-dir", "exclude"}),
    "HEALTHCHECK": frozenset({"interval", "timeout", "start-period", "start-interval", "retries"}),
}
REPEATABLE_FLAGS = frozenset({"mount", "exclude"})
INSTRUCTIONS = frozenset({"FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "LABEL", "EXPOSE",
                          "VOLUME", "ENTRYPOINT", "CMD", "STOPSIGNAL", "HEALTHCHECK", "ONBUILD", "SHELL",
                          "MAINTAINER"})
NOT_IN_ONBUILD = frozenset({"FROM", "ONBUILD", "MAINTAINER"})


class DockerfileError(HydriaError):
    """A Dockerfile that Docker's builder would refuse, with its file and line."""


class Heredoc(Record):
    name: str
    content: str
    strip_tabs: bool = False


class Instruction(Record):
    """One instruction: ``keyword`` upper case; ``arguments`` as the parser split them (quotes
    kept, variables not expanded); ``exec_form`` for the JSON form; ``flags`` by name (a list:
    ``--mount`` repeats)."""

    keyword: str
    arguments: tuple[str, ...]
    flags: dict[str, list[str]]
    exec_form: bool
    text: str  # the instruction as written (continuations joined), for history and the cache
    line: int
    where: str  # "FILE:LINE"
    heredocs: tuple[Heredoc, ...] = ()
    trigger: Instruction | None = None  # ONBUILD's instruction

    def error(self, message: str, hint: str | None = None) -> DockerfileError:
        return DockerfileError(f"{self.where}: {self.keyword}: {message}", hint=hint)

    def flag(self, name: str) -> str | None:
        values = self.flags.get(name)
        return values[-1] if values else None


class Stage(Record):
    number: int
    name: str | None  # FROM ... AS NAME, lower case
    base: str  # FROM's image word, variables not expanded
    platform: str | None
    instruction: Instruction  # the FROM
    instructions: tuple[Instruction, ...]


class Dockerfile(Record):
    path: str
    global_args: tuple[Instruction, ...]  # the ARGs before the first FROM
    stages: tuple[Stage, ...]
    escape: str

    def stage(self, name_or_index: str) -> Stage | None:
        """The stage named so (case-insensitive), or of that index."""
        wanted = name_or_index.lower()
        for stage in self.stages:
            if stage.name == wanted:
                return stage
        if is_number(wanted) and int(wanted) < len(self.stages):
            return self.stages[int(wanted)]
        return None


def read(path: str) -> Dockerfile:
    """Parse and check the Dockerfile at ``path``.

    Raises:
        DockerfileError, NotFound: a missing, unreadable or invalid Dockerfile.
    """
    try:
        with open_binary(path) as handle:
            data = handle.read(MAX_SIZE + 1)
    except FileNotFoundError:
        raise missing_file(str(path), hint="give the Dockerfile with -f, or put one in the build context") from None
    except OSError as e:
        raise DockerfileError(f"cannot read {path}: {e.strerror}") from None
    if len(data) > MAX_SIZE:
        raise DockerfileError(f"{path} is larger than {MAX_SIZE >> 20} MiB", hint="is it a Dockerfile?")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise DockerfileError(f"{path} is not UTF-8 text", hint="is it a Dockerfile?") from None
    return parse(text, path)


def parse(text: str, path: str = "Dockerfile") -> Dockerfile:
    """Parse ``text`` (the contents of ``path``). Raises DockerfileError."""
    import dockerfile as buildkit

    shown = path
    if "\0" in text:
        raise DockerfileError(f"{shown} contains a NUL byte", hint="is it a Dockerfile?")
    try:
        commands = buildkit.parse_string(text)
    except buildkit.GoParseError as e:
        raise DockerfileError(f"{shown}: {e}", hint="see https://docs.docker.com/reference/dockerfile/") from None
    instructions = [_instruction(command, shown) for command in commands]
    return _stages(instructions, shown, _escape_directive(text))


def _escape_directive(text: str) -> str:
    """The ``# escape=`` parser directive (BuildKit's parser applied it already; the word
    expansion needs it too)."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            break
        key, equals, value = stripped[1:].partition("=")
        if equals and key.strip().lower() == "escape" and value.strip() in ("\\", "`"):
            return value.strip()
    return "\\"


def _instruction(command: Any, path: str) -> Instruction:
    cmd = str(command.cmd).upper()
    line = int(command.start_line)
    where = f"{path}:{line}"
    if cmd not in INSTRUCTIONS:
        raise DockerfileError(f"{where}: unknown instruction: {command.cmd}",
                              hint="see https://docs.docker.com/reference/dockerfile/ for the instructions")
    flags = _flags(cmd, tuple(command.flags), where)
    heredocs = tuple(Heredoc(h.name, h.content) for h in command.heredocs)
    value = tuple(str(v) for v in command.value)
    original = str(command.original)
    if cmd == "ONBUILD":
        return _onbuild(command, value, original, line, where)
    instruction = Instruction(cmd, value, flags, bool(command.json), original, line, where, heredocs)
    _check_form(instruction)
    return instruction


def _onbuild(command: Any, value: tuple[str, ...], original: str, line: int, where: str) -> Instruction:
    sub = str(command.sub_cmd or "").upper()
    if not sub:
        raise DockerfileError(f"{where}: ONBUILD needs an instruction", hint="e.g. ONBUILD COPY . /app")
    if sub in NOT_IN_ONBUILD:
        raise DockerfileError(f"{where}: ONBUILD: {sub} is not allowed as an ONBUILD trigger")
    if sub not in INSTRUCTIONS:
        raise DockerfileError(f"{where}: ONBUILD: unknown instruction: {sub}")
    trigger_text = original.split(None, 1)[1] if " " in original.strip() else ""
    trigger = parse_trigger(trigger_text, where)
    return Instruction("ONBUILD", value, {}, False, original, line, where, trigger=trigger)


def parse_trigger(text: str, where: str) -> Instruction:
    """An ONBUILD trigger's instruction (written ``RUN ...``), parsed on its own."""
    import dockerfile as buildkit

    try:
        commands = buildkit.parse_string(text)
    except buildkit.GoParseError as e:
        raise DockerfileError(f"{where}: ONBUILD: {e}") from None
    if len(commands) != 1:
        raise DockerfileError(f"{where}: ONBUILD takes one instruction")
    command = commands[0]
    cmd = str(command.cmd).upper()
    if cmd in NOT_IN_ONBUILD or cmd not in INSTRUCTIONS:
        raise DockerfileError(f"{where}: ONBUILD: {cmd} is not allowed as an ONBUILD trigger")
    instruction = Instruction(cmd, tuple(command.value), _flags(cmd, tuple(command.flags), where),
                              bool(command.json), str(command.original), int(command.start_line), where,
                              tuple(Heredoc(h.name, h.content) for h in command.heredocs))
    _check_form(instruction)
    return instruction


def _flags(cmd: str, raw: Sequence[str], where: str) -> dict[str, list[str]]:
    allowed = FLAGS.get(cmd, frozenset())
    flags: dict[str, list[str]] = {}
    for item in raw:
        name, equals, value = item[2:].partition("=")
        if not item.startswith("--") or name not in allowed:
            known = ", ".join(f"--{f}" for f in sorted(allowed)) or "none"
            raise DockerfileError(f"{where}: {cmd}: unknown flag: {item.split('=')[0]}",
                                  hint=f"{cmd} takes: {known}")
        if not equals and name not in ("link", "keep-git-dir"):
            raise DockerfileError(f"{where}: {cmd}: --{name} needs a value (--{name}=VALUE)")
        if name in flags and name not in REPEATABLE_FLAGS:
            raise DockerfileError(f"{where}: {cmd}: --{name} given twice")
        flags.setdefault(name, []).append(value if equals else "true")
    return flags


_EXACTLY_ONE = frozenset({"WORKDIR", "USER", "STOPSIGNAL", "MAINTAINER"})
_AT_LEAST_ONE = frozenset({"RUN", "ENV", "LABEL", "EXPOSE", "VOLUME", "SHELL", "HEALTHCHECK", "FROM", "ARG"})


def _check_form(instruction: Instruction) -> None:
    keyword, arguments = instruction.keyword, instruction.arguments
    if keyword in _EXACTLY_ONE and len(arguments) != 1:
        raise instruction.error("takes exactly one argument")
    if keyword in _AT_LEAST_ONE and not any(a.strip() for a in arguments):
        raise instruction.error("needs an argument")
    if keyword in ("COPY", "ADD") and len(arguments) < 2 and not instruction.heredocs:
        raise instruction.error("needs a source and a destination", hint=f"{keyword} SOURCE... DESTINATION")
    if keyword == "SHELL" and not instruction.exec_form:
        raise instruction.error("takes the JSON form", hint='e.g. SHELL ["/bin/bash", "-c"]')
    if keyword in ("ENV", "LABEL") and len(arguments) % 2:
        raise instruction.error("takes KEY=VALUE pairs")
    if keyword == "ARG" and any(not a.partition("=")[0] for a in arguments):
        raise instruction.error("takes NAME[=DEFAULT]...")
    if keyword == "FROM" and not (len(arguments) == 1 or (len(arguments) == 3 and arguments[1].lower() == "as")):
        raise instruction.error("takes IMAGE [AS NAME]")


def _stages(instructions: list[Instruction], path: str, escape: str) -> Dockerfile:
    global_args: list[Instruction] = []
    stages: list[Stage] = []
    current: list[Instruction] | None = None
    names: set[str] = set()
    for instruction in instructions:
        if instruction.keyword == "FROM":
            if current is not None:
                stages[-1] = stages[-1]._replace(instructions=tuple(current))
            name = instruction.arguments[2].lower() if len(instruction.arguments) == 3 else None
            if name is not None:
                if name in names:
                    raise instruction.error(f"the stage name {name!r} is used twice")
                if not name.replace("-", "").replace("_", "").replace(".", "").isalnum() or not name[0].isalpha():
                    raise instruction.error(f"invalid stage name {name!r}",
                                            hint="a letter, then letters, digits, '-', '_' or '.'")
                names.add(name)
            stages.append(Stage(len(stages), name, instruction.arguments[0], instruction.flag("platform"),
                                instruction, ()))
            current = []
        elif current is None:
            if instruction.keyword != "ARG":
                raise instruction.error("comes before the first FROM",
                                        hint="only ARG may come before FROM; a Dockerfile starts with FROM")
            global_args.append(instruction)
        else:
            current.append(instruction)
    if not stages:
        raise DockerfileError(f"{path}: no FROM instruction", hint="a Dockerfile starts with FROM IMAGE")
    assert current is not None
    stages[-1] = stages[-1]._replace(instructions=tuple(current))
    return Dockerfile(path, tuple(global_args), tuple(stages), escape)
