"""enroot's fstab dialect: parsing, shorthands, ``${VAR}`` substitution, options. Pure.

Shorthands: ``tmpfs /dst`` (creating ``/dst``); ``/src`` (bind at the same path); ``/src bind``; ``/src /dst``;
``/src /dst bind``. A ``none`` type with a path source is a bind (``rbind,x-create=auto`` when no
options are given). The sixth field is the pass: -1 mounts before hooks, 0 after.
"""

from __future__ import annotations

from hydria.errors import HydriaError
from hydria.expand import name_end
from hydria.record import TYPE_CHECKING, Record
from hydria.runtime import syscalls as sc

if TYPE_CHECKING:
    from collections.abc import Mapping

FLAGS: Mapping[str, tuple[int, bool]] = {  # option -> (flag, set?)
    "ro": (sc.MS_RDONLY, True), "rw": (sc.MS_RDONLY, False),
    "nosuid": (sc.MS_NOSUID, True), "suid": (sc.MS_NOSUID, False),
    "nodev": (sc.MS_NODEV, True), "dev": (sc.MS_NODEV, False),
    "noexec": (sc.MS_NOEXEC, True), "exec": (sc.MS_NOEXEC, False),
    "sync": (sc.MS_SYNCHRONOUS, True), "async": (sc.MS_SYNCHRONOUS, False),
    "dirsync": (sc.MS_DIRSYNC, True), "mand": (sc.MS_MANDLOCK, True), "nomand": (sc.MS_MANDLOCK, False),
    "noatime": (sc.MS_NOATIME, True), "atime": (sc.MS_NOATIME, False),
    "nodiratime": (sc.MS_NODIRATIME, True), "diratime": (sc.MS_NODIRATIME, False),
    "relatime": (sc.MS_RELATIME, True), "norelatime": (sc.MS_RELATIME, False),
    "strictatime": (sc.MS_STRICTATIME, True), "nostrictatime": (sc.MS_STRICTATIME, False),
    "lazytime": (sc.MS_LAZYTIME, True), "nolazytime": (sc.MS_LAZYTIME, False),
    "remount": (sc.MS_REMOUNT, True), "bind": (sc.MS_BIND, True), "rbind": (sc.MS_BIND | sc.MS_REC, True),
    "silent": (sc.MS_SILENT, True), "loud": (sc.MS_SILENT, False), "defaults": (0, True),
}
PROPAGATION: Mapping[str, int] = {
    "shared": sc.MS_SHARED, "slave": sc.MS_SLAVE, "private": sc.MS_PRIVATE, "unbindable": sc.MS_UNBINDABLE,
    "rshared": sc.MS_SHARED | sc.MS_REC, "rslave": sc.MS_SLAVE | sc.MS_REC,
    "rprivate": sc.MS_PRIVATE | sc.MS_REC, "runbindable": sc.MS_UNBINDABLE | sc.MS_REC,
}
IGNORED = frozenset({"auto", "noauto", "user", "nouser", "users", "nousers", "group", "nogroup", "owner",
                     "noowner", "nofail", "iversion", "noiversion"})
_KNOWN_OPTIONS = frozenset(FLAGS) | frozenset(PROPAGATION) | IGNORED
# A host file shown read-only at a path the container may lack (driver libraries, rc.local overrides).
READ_ONLY_FILE_BIND = ("x-create=file", "bind", "ro", "nosuid", "nodev", "private")


class FstabError(HydriaError):
    pass


class MountEntry(Record):
    source: str
    target: str
    fstype: str
    options: tuple[str, ...]
    passno: int = 0
    origin: str = ""

    @property
    def is_bind(self) -> bool:
        return "bind" in self.options or "rbind" in self.options

    def option_value(self, name: str) -> str | None:
        for option in self.options:
            key, _, value = option.partition("=")
            if key == name:
                return value or ""
        return None

    def split_options(self) -> tuple[int, int, str, bool]:
        """(flags, propagation flags, filesystem data, recursive bind) from the options."""
        flags = propagation = 0
        data = []
        for option in self.options:
            if option in FLAGS:
                flag, enable = FLAGS[option]
                flags = flags | flag if enable else flags & ~flag
            elif option in PROPAGATION:
                propagation |= PROPAGATION[option]
            elif option in IGNORED or option.startswith("x-"):
                continue
            else:
                data.append(option)
        if "bind" in self.options and "rbind" not in self.options:
            flags &= ~sc.MS_REC
        return flags, propagation, ",".join(data), bool(flags & sc.MS_REC)


def substitute(text: str, env: Mapping[str, str]) -> str:
    """enroot's substitution: only ``${NAME}``; an unset variable becomes empty.

    A scanner, not ``re``: every image with a VOLUME has ``${HYDRIA_ROOTFS}`` in its fstab, and
    importing ``re`` would cost each of its starts (docs/runtime.md, start latency).
    """
    pieces = []
    start = 0
    while (dollar := text.find("${", start)) >= 0:
        end = name_end(text, dollar + 2)
        if end > dollar + 2 and text.startswith("}", end):
            pieces += [text[start:dollar], env.get(text[dollar + 2:end], "")]
            start = end + 1
        else:
            pieces.append(text[start:dollar + 2])
            start = dollar + 2
    pieces.append(text[start:])
    return "".join(pieces)


def unescape(field: str) -> str:
    """fstab and mountinfo write space, tab, newline and backslash (any byte) as ``\\ooo``."""
    if "\\" not in field:
        return field
    first, *rest = field.split("\\")
    pieces = [first]
    for piece in rest:
        code = piece[:3]
        if len(code) == 3 and all(c in "01234567" for c in code):
            pieces.append(chr(int(code, 8)) + piece[3:])
        else:
            pieces.append("\\" + piece)
    return "".join(pieces)


def parse_line(line: str, origin: str = "") -> MountEntry | None:
    """One fstab line; None for blank lines and comments. Raises FstabError."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    if fields[0] == "tmpfs" and len(fields) == 2:
        fields = ["tmpfs", fields[1], "tmpfs", "x-create=dir"]
    elif len(fields) == 1:
        fields = [fields[0], fields[0], "none", "rbind,x-create=auto"]
    elif len(fields) == 2 and fields[1].split(",")[0] in _KNOWN_OPTIONS:
        fields = [fields[0], fields[0], "none", fields[1]]
    elif len(fields) == 2:
        fields = [*fields, "none", "rbind,x-create=auto"]
    elif len(fields) == 3 and fields[2].split(",")[0] in _KNOWN_OPTIONS | {"x-create=dir", "x-create=file",
                                                                           "x-create=auto", "x-detach", "x-move"}:
        fields = [fields[0], fields[1], "none", fields[2]]
    if len(fields) < 3:
        raise _invalid_entry(line, origin)
    source, target, fstype = (unescape(f) for f in fields[:3])
    options = tuple(o for o in (fields[3] if len(fields) > 3 else "").split(",") if o)
    if fstype == "none" and source != "tmpfs" and not {"bind", "rbind"} & set(options) \
            and not any(o.startswith(("x-detach", "x-move")) for o in options):
        # A path source with type none is a bind: recursive, creating its target, unless told otherwise.
        options = ("rbind", *(() if any(o.startswith("x-create") for o in options) else ("x-create=auto",)),
                   *options)
    try:
        freq = int(fields[4]) if len(fields) > 4 else 0
        passno = int(fields[5]) if len(fields) > 5 else 0
    except ValueError:
        raise _invalid_entry(line, origin) from None
    if passno == 0 and freq != 0:
        passno = freq
    if fstype == "none" and source == "tmpfs":
        fstype = "tmpfs"
    return MountEntry(source, target, fstype, options, passno, origin)


MOUNT_OPTION_FORM = ("a --mount is fstab's fields separated by ':', SRC:DST[:TYPE[:OPTIONS[:FREQ:PASSNO]]], "
                     "e.g. /data:/data or /data:/data:none:bind,ro")


def _invalid_entry(line: str, origin: str) -> FstabError:
    form = MOUNT_OPTION_FORM if origin == "--mount" else \
        "a line is SOURCE TARGET TYPE OPTIONS [FREQ [PASSNO]], the fields of /etc/fstab"
    return FstabError(f'invalid fstab entry: "{line.strip()}" at {origin or "command line"}', hint=form)


def parse(text: str, origin: str, env: Mapping[str, str] | None = None) -> list[MountEntry]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = parse_line(substitute(line, env) if env is not None else line, f"{origin}:{number}")
        if entry is not None:
            entries.append(entry)
    return entries


def from_mount_option(value: str) -> MountEntry:
    """``--mount SRC:DST[:TYPE[:OPTIONS]]``: fstab fields separated by ``:``. Raises FstabError."""
    if not all(value.split(":")) or any(c.isspace() for c in value):  # \S+(:\S+)*
        raise FstabError(f"Invalid argument: {value}", hint=MOUNT_OPTION_FORM)
    entry = parse_line(value.replace(":", " "), "--mount")
    if entry is None:
        raise FstabError(f"Invalid argument: {value}", hint=MOUNT_OPTION_FORM)
    if entry.passno != 0:
        raise FstabError(f"Invalid argument: {value}: a --mount is mounted after the hooks, never in pass "
                         f"{entry.passno}", hint="leave out FREQ:PASSNO, or give 0:0")
    return entry
