"""Registry credentials from ``$HYDRIA_CONFIG_PATH/.credentials``, enroot's netrc dialect:

    machine nvcr.io login $oauthtoken password MY_API_KEY
    machine 123.dkr.ecr.eu-west-1.amazonaws.com login AWS password $(aws ecr get-login-password)

One entry a line, as enroot writes them, or netrc's entries over several lines. A password
starting with ``$`` is expanded by ``sh`` (a variable or a command), as enroot does, so tokens
need not be stored in the file. An entry may name the registry with its port or without it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from hydria.errors import HydriaError
from hydria.record import Record

_KEYWORD = re.compile(r"(?<!\S)(machine|login|password)\s+(\S+)")

class CredentialsError(HydriaError):
    """The credentials file cannot be used."""


class Credential(Record):
    machine: str
    login: str
    password: str | None


def parse_credentials(text: str) -> list[Credential]:
    """Entries of a credentials file: enroot's one entry a line, or netrc's entries over several
    lines (``machine`` starts an entry; ``login`` and ``password`` follow on its line or the next
    ones). A password is the rest of its line, so that it may be ``$(command)``. Comment and
    blank lines are skipped; an entry without a login is left out."""
    entries: list[Credential] = []
    current: dict[str, str] = {}

    def finish() -> None:
        if "machine" in current and "login" in current:
            entries.append(Credential(current["machine"], current["login"], current.get("password")))

    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in _KEYWORD.finditer(line):
            keyword = match[1]
            if keyword == "password":
                current["password"] = line[match.start(2):].strip()
                break
            if keyword == "machine":
                finish()
                current = {}
            current[keyword] = match[2]
    finish()
    return entries


def host_of(registry: str) -> str:
    return registry.rsplit(":", 1)[0] if re.search(r":\d+$", registry) else registry


def find(entries: list[Credential], registry: str, login: str | None) -> Credential | None:
    """The entry for ``registry`` (and ``login`` when given): one naming the registry with its
    port first, else one naming its host; the first one wins."""
    for machine in dict.fromkeys((registry, host_of(registry))):
        for entry in entries:
            if entry.machine == machine and (login is None or entry.login == login):
                return entry
    return None


def describe(entries: list[Credential], path: Path, registry: str) -> str:
    """What the credentials file holds for ``registry``, for a hint after a refused login."""
    if not path.exists():
        return f"{path} does not exist"
    found = find(entries, registry, None)
    if found is not None:
        return f"{path} has an entry for {found.machine} (login {found.login})"
    machines = ", ".join(dict.fromkeys(entry.machine for entry in entries)) or "none"
    return f"{path} has no entry for {registry} (its machines: {machines})"


def load(path: Path) -> list[Credential]:
    try:
        return parse_credentials(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise CredentialsError(f"cannot read {path}: {e}") from None


def password_of(entry: Credential) -> str | None:
    """The password, expanding a leading ``$`` with the shell. Raises CredentialsError."""
    if entry.password is None or not entry.password.startswith("$"):
        return entry.password
    result = subprocess.run(["sh", "-c", f'printf "%s" {entry.password}'], capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0 or not result.stdout:
        raise CredentialsError(f"the password of {entry.login}@{entry.machine} in the credentials file "
                               f"did not expand: {result.stderr.strip() or 'empty result'}")
    return result.stdout
