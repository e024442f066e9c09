"""Registry credentials from ``$HYDRIA_CONFIG_PATH/.credentials``, enroot's netrc dialect:

    machine nvcr.io login $oauthtoken password MY_API_KEY
    machine 123.dkr.ecr.eu-west-1.amazonaws.com login AWS password $(aws ecr get-login-password)

One entry a line. A password starting with ``$`` is expanded by ``sh`` (a variable or a command),
as enroot does, so tokens need not be stored in the file. Lookups use the registry host without
its port.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hydria.errors import HydriaError

_LINE = re.compile(r"^\s*machine\s+(?P<machine>\S+)\s+login\s+(?P<login>\S+)(?:\s+password\s+(?P<password>.*?))?\s*$")


class CredentialsError(HydriaError):
    """The credentials file cannot be used."""


@dataclass(frozen=True)
class Credential:
    machine: str
    login: str
    password: str | None


def parse_credentials(text: str) -> list[Credential]:
    """Entries of a credentials file; other lines (comments, blank) are ignored."""
    return [Credential(m["machine"], m["login"], m["password"])
            for line in text.splitlines() if (m := _LINE.match(line))]


def host_of(registry: str) -> str:
    return registry.rsplit(":", 1)[0] if re.search(r":\d+$", registry) else registry


def find(entries: list[Credential], registry: str, login: str | None) -> Credential | None:
    """The entry for ``registry`` (and ``login`` when given); the first one wins."""
    host = host_of(registry)
    for entry in entries:
        if entry.machine == host and (login is None or entry.login == login):
            return entry
    return None


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
