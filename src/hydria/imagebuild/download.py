"""``ADD URL``: a file downloaded for the build, as Docker's builder does it: named after the
last part of the URL's path, mode 0600, its modification time the server's ``Last-Modified``,
never unpacked; ``--checksum=sha256:HEX`` must match what arrived. Proxies come from the
environment (``HTTPS_PROXY``, ...), as for every download of hydria, and the download is bounded
as a registry's are: no byte for a minute, fewer than 1 KiB a minute, or more time than
``HYDRIA_TRANSFER_TIMEOUT`` in all ends it (docs/build.md).
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import posixpath
import urllib.parse

import httpx

from hydria.config import Settings
from hydria.image.sources.httpbody import Pace
from hydria.image.sources.registryhttp import STALL, describe
from hydria.imagebuild.dockerfile import Instruction


def is_url(word: str) -> bool:
    return word.startswith(("http://", "https://"))


def fetch(instruction: Instruction, url: str, folder: str, checksum: str | None, settings: Settings) -> str:
    """Download ``url`` into ``folder``; the file's name there. Raises DockerfileError."""
    try:
        name = posixpath.basename(urllib.parse.urlsplit(url).path)
    except ValueError as e:  # a host in brackets that is no address
        raise instruction.error(f"{url}: not a URL: {e}", hint="check the URL") from None
    if not name or name in (".", ".."):
        raise instruction.error(f"{url}: the URL names no file", hint="give a URL whose path ends in the file's name")
    if checksum is not None and not checksum.startswith("sha256:"):
        raise instruction.error(f"--checksum={checksum}: not sha256:HEX", hint="e.g. --checksum=sha256:9f86d08...")
    path = os.path.join(folder, name)
    digest = hashlib.sha256()
    stall = min(STALL, settings.transfer_timeout or STALL)
    timeout = httpx.Timeout(stall, connect=settings.connect_timeout or None)
    pace = Pace(settings.transfer_timeout, STALL)
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=timeout) as response:
            if response.status_code >= 400:
                raise instruction.error(f"{url}: the server answered {response.status_code}")
            with open(path, "wb") as out:
                for chunk in response.iter_bytes():  # as they arrive: the pace is checked on each
                    digest.update(chunk)
                    out.write(chunk)
                    slow = pace.too_slow(len(chunk))
                    if slow:
                        raise instruction.error(f"{url}: the download {slow}",
                                                hint="the server is stalled or very slow; HYDRIA_TRANSFER_TIMEOUT "
                                                     "sets the time a download may take")
            modified = response.headers.get("Last-Modified")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, UnicodeError) as e:
        # ValueError: a host that is no address (http://[::::]/); UnicodeError: one idna refuses
        raise instruction.error(f"{url}: cannot download: {describe(e, stall)}",
                                hint="check the URL and the network (proxies: HTTPS_PROXY)") from None
    except OSError as e:
        raise instruction.error(f"{url}: cannot write the download: {e.strerror}",
                                hint="make room where HYDRIA_CACHE_PATH is (the build's step folders)") from None
    if checksum is not None and f"sha256:{digest.hexdigest()}" != checksum:
        raise instruction.error(f"{url}: the download is sha256:{digest.hexdigest()}, --checksum says {checksum}",
                                hint="the file changed on the server, or the checksum is wrong")
    os.chmod(path, 0o600)
    if modified:
        try:
            when = email.utils.parsedate_to_datetime(modified).timestamp()
            os.utime(path, (when, when))
        except (TypeError, ValueError):
            pass  # no date a client can read: the time of the download stays
    return name
