"""A stage's image as the build goes: its config (what ``ENV``, ``WORKDIR``, ``CMD`` and the other
instructions that change no file set), its layers, its history, its variables and its key.

The instructions that only change the config are applied here (:func:`apply_config`), with their
words expanded as Docker's builder expands them (build/words.py).
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hydria.digits import is_number
from hydria.image.ref import manifest as mf
from hydria.imagebuild.dockerfile import Instruction
from hydria.imagebuild.words import expand, expand_words

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SHELL = ("/bin/sh", "-c")
# Docker's predefined proxy arguments: usable without an ARG, left out of the history and the cache key
PROXY_ARGS = frozenset({"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "FTP_PROXY", "ftp_proxy",
                        "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_NANOSECONDS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


@dataclass
class LayerRef:
    """A layer of the image: its descriptor and diff ID; ``tree``: its overlay folder (a layer of
    this build), or None (a layer of the base image, which its squashfs holds)."""

    descriptor: mf.Descriptor
    diff_id: str
    tree: str | None = None
    origin: str | None = None  # the registry image (URI) a base image's layer came from


@dataclass
class StageImage:
    config: dict[str, Any]  # the image config's "config" object
    platform: mf.Platform
    key: str
    layers: list[LayerRef] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    base_images: Callable[[], tuple[str, ...]] | None = None  # makes (once) and gives the base image's squashfs
    # images, the lowest first: one merged image, or its layer images (HYDRIA_LAYERED_IMAGES)
    open_base_blob: Callable[[mf.Descriptor], Any] | None = None
    args: dict[str, str] = field(default_factory=dict)  # the ARGs in scope that have a value
    author: str | None = None
    cmd_set: bool = False  # a CMD in this stage (an ENTRYPOINT resets the base image's CMD)

    def derived(self) -> StageImage:
        """A copy for a stage that starts FROM this one."""
        return StageImage(copy.deepcopy(self.config), self.platform, self.key, list(self.layers),
                          copy.deepcopy(self.history), self.base_images, self.open_base_blob, {}, self.author)

    @property
    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in self.config.get("Env") or []:
            name, _, value = str(item).partition("=")
            env[name] = value
        return env

    def set_env(self, name: str, value: str) -> None:
        env = self.environment
        env[name] = value
        self.config["Env"] = [f"{k}={v}" for k, v in env.items()]

    @property
    def variables(self) -> dict[str, str]:
        """What ``$NAME`` expands to: the ARGs in scope, then ENV (which wins)."""
        return {**self.args, **self.environment}

    @property
    def workdir(self) -> str:
        return str(self.config.get("WorkingDir") or "/")

    @property
    def shell(self) -> list[str]:
        return list(self.config.get("Shell") or DEFAULT_SHELL)

    def trees(self) -> list[str]:
        """The overlay folders of this build's layers, top first."""
        return [layer.tree for layer in reversed(self.layers) if layer.tree is not None]

    def record(self, instruction: Instruction, empty: bool) -> None:
        entry: dict[str, Any] = {"created": now(), "created_by": instruction.text, "comment": "hydria build"}
        if empty:
            entry["empty_layer"] = True
        self.history.append(entry)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def resolve_path(workdir: str, path: str) -> str:
    """A container path relative to ``workdir``, made absolute (trailing ``/`` kept)."""
    import posixpath

    joined = path if path.startswith("/") else posixpath.join(workdir, path)
    normal = posixpath.normpath(joined)
    return normal + ("/" if path.endswith("/") and normal != "/" else "")


def _duration(instruction: Instruction, name: str, text: str) -> int:
    total, position = 0, 0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += int(float(match.group(1)) * _NANOSECONDS[match.group(2)])
        position = match.end()
    if position != len(text) or not text:
        raise instruction.error(f"--{name}={text}: not a duration", hint="e.g. 30s, 1m30s, 500ms")
    return total


def _command(instruction: Instruction, image: StageImage) -> list[str]:
    if instruction.exec_form:
        return list(instruction.arguments)
    return [*image.shell, " ".join(instruction.arguments)]


def _healthcheck(instruction: Instruction, image: StageImage) -> dict[str, Any]:
    words = instruction.arguments
    if words[0].upper() == "NONE":
        if len(words) > 1 or instruction.flags:
            raise instruction.error("HEALTHCHECK NONE takes nothing else")
        return {"Test": ["NONE"]}
    if words[0].upper() != "CMD" or len(words) < 2:
        raise instruction.error("takes CMD COMMAND or NONE", hint="e.g. HEALTHCHECK --interval=30s CMD curl -f http://localhost/")
    if instruction.exec_form:
        test = ["CMD", *words[1:]]
    else:
        test = ["CMD-SHELL", " ".join(words[1:])]
    check: dict[str, Any] = {"Test": test}
    for name, key in (("interval", "Interval"), ("timeout", "Timeout"), ("start-period", "StartPeriod"),
                      ("start-interval", "StartInterval")):
        value = instruction.flag(name)
        if value is not None:
            check[key] = _duration(instruction, name, value)
    retries = instruction.flag("retries")
    if retries is not None:
        if not is_number(retries):
            raise instruction.error(f"--retries={retries}: not a number")
        check["Retries"] = int(retries)
    return check


def _pairs(instruction: Instruction, variables: Mapping[str, str], escape: str) -> list[tuple[str, str]]:
    arguments = instruction.arguments
    pairs = []
    for index in range(0, len(arguments), 2):
        name = expand(arguments[index], variables, escape)
        if not name:
            raise instruction.error("a name is empty")
        pairs.append((name, expand(arguments[index + 1], variables, escape)))
    return pairs


def apply_config(instruction: Instruction, image: StageImage, escape: str) -> str:
    """Apply an instruction that changes only the config; returns what it set, for the cache key."""
    keyword, config = instruction.keyword, image.config
    variables = image.variables
    if keyword == "ENV":
        pairs = _pairs(instruction, variables, escape)
        for name, value in pairs:
            image.set_env(name, value)
        return repr(pairs)
    if keyword == "LABEL":
        pairs = _pairs(instruction, variables, escape)
        config.setdefault("Labels", {}).update(dict(pairs))
        return repr(pairs)
    if keyword == "USER":
        config["User"] = expand(instruction.arguments[0], variables, escape)
        return str(config["User"])
    if keyword == "EXPOSE":
        ports = config.setdefault("ExposedPorts", {})
        for word in instruction.arguments:
            for port in expand_words(word, variables, escape):
                number, _, protocol = port.partition("/")
                if not is_number(number.replace("-", "")) or protocol not in ("", "tcp", "udp", "sctp"):
                    raise instruction.error(f"invalid port {port!r}", hint="e.g. EXPOSE 80, EXPOSE 53/udp")
                ports[f"{number}/{protocol or 'tcp'}"] = {}
        return repr(sorted(ports))
    if keyword == "VOLUME":
        volumes = config.setdefault("Volumes", {})
        for word in instruction.arguments:
            for path in ([expand(word, variables, escape)] if instruction.exec_form else
                         expand_words(word, variables, escape)):
                if not path:
                    raise instruction.error("a volume path is empty")
                volumes[path] = {}
        return repr(sorted(volumes))
    if keyword in ("CMD", "ENTRYPOINT"):
        if keyword == "ENTRYPOINT" and not instruction.exec_form and not " ".join(instruction.arguments).strip():
            config["Entrypoint"] = None
        else:
            config["Cmd" if keyword == "CMD" else "Entrypoint"] = _command(instruction, image)
        if keyword == "CMD":
            image.cmd_set = True
        elif not image.cmd_set:
            config["Cmd"] = None
        return repr(config.get("Cmd")) + repr(config.get("Entrypoint"))
    if keyword == "SHELL":
        config["Shell"] = list(instruction.arguments)
        return repr(config["Shell"])
    if keyword == "STOPSIGNAL":
        config["StopSignal"] = expand(instruction.arguments[0], variables, escape)
        return str(config["StopSignal"])
    if keyword == "HEALTHCHECK":
        config["Healthcheck"] = _healthcheck(instruction, image)
        return repr(config["Healthcheck"])
    if keyword == "ONBUILD":
        config.setdefault("OnBuild", []).append(instruction.text.split(None, 1)[1])
        return repr(config["OnBuild"])
    if keyword == "MAINTAINER":
        image.author = instruction.arguments[0]
        return image.author
    raise AssertionError(keyword)
