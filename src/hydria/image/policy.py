"""The site's image policy: which images may enter this cluster, in the format of containers'
``policy.json`` (containers-policy.json(5)), so that a site that runs podman can reuse its own.

A policy gives each image a list of requirements, every one of which must accept it: the list of
the most specific scope that names the image in ``transports`` (for ``docker``: the repository
with its tag or digest, the repository, each namespace above it, the registry, ``*.DOMAIN``
wildcards of the registry; for local files: the path and each folder above it), else the
transport's ``""``, else ``default``. Checked before anything of the image is read, wherever
images enter: ``import``, ``load``, a Slurm step's import, ``store import``, ``build``'s ``FROM``
(docs/security.md, "Which images may enter").

Requirements this version takes: ``insecureAcceptAnything`` and ``reject``. A policy that asks
for signatures (``signedBy``, ``sigstoreSigned``) is refused as a whole, naming the rule: hydria
does not verify signatures yet, and a requirement it cannot check must not pass for one it did.
"""

from __future__ import annotations

import json
import os

from hydria.config import Settings
from hydria.errors import ConfigError, HydriaError
from hydria.image.ref.reference import (
    DOCKER_HUB,
    EngineImage,
    ImageReference,
    LocalImage,
    RegistryImage,
)
from hydria.paths import read_text
from hydria.record import Record

ACCEPT = "insecureAcceptAnything"
REJECT = "reject"
SIGNATURES = ("signedBy", "sigstoreSigned")
MAX_SIZE = 1 << 20
FILE_NAME = "policy.json"  # in HYDRIA_SYSCONF_PATH, where HYDRIA_POLICY_PATH names none


class ImageRefused(HydriaError):
    """The site's policy does not let the image in."""


class Rule(Record):
    where: str  # how the policy file names it: default, transports.docker["nvcr.io"]
    requirements: tuple[str, ...]


class Policy(Record):
    path: str
    default: Rule
    transports: dict[str, dict[str, Rule]]

    def rule_for(self, ref: ImageReference) -> Rule:
        """The rule of the most specific scope that names ``ref``."""
        transport, scopes = _scopes(ref)
        rules = self.transports.get(transport, {})
        for scope in scopes:
            if scope in rules:
                return rules[scope]
        return rules.get("", self.default)


def configured(settings: Settings) -> Policy | None:
    """The site's policy: the file HYDRIA_POLICY_PATH names (it must be there), else
    HYDRIA_SYSCONF_PATH/policy.json where there is one; None without either.

    Raises:
        ConfigError: a policy file that cannot be read, is no policy, or asks what hydria cannot check.
    """
    path = settings.policy_path or os.path.join(settings.sysconf_path, FILE_NAME)
    try:
        text = read_text(path)
    except FileNotFoundError:
        if not settings.policy_path:
            return None
        raise ConfigError(f"the image policy {path} (HYDRIA_POLICY_PATH) is missing",
                          hint="install the site's policy.json there, or unset HYDRIA_POLICY_PATH") from None
    except OSError as e:
        raise ConfigError(f"cannot read the image policy {path}: {e.strerror}",
                          hint="the administrator makes it a file every user can read") from None
    return parse(text[:MAX_SIZE + 1], path)


def check(ref: ImageReference, settings: Settings) -> None:
    """Raise ImageRefused unless the site's policy lets ``ref`` in (ConfigError for a bad policy)."""
    policy = configured(settings)
    if policy is None:
        return
    rule = policy.rule_for(ref)
    if REJECT in rule.requirements:
        raise ImageRefused(f"the site's image policy refuses {ref.uri}: {rule.where} in {policy.path} is \"reject\"",
                           hint="ask the administrator to allow the registry or repository, or use an image "
                                "from one the policy accepts")


def parse(text: str, path: str) -> Policy:
    """The policy that ``text`` (the file ``path``) holds. Raises ConfigError naming the field."""
    if len(text) > MAX_SIZE:
        raise _invalid(path, "the file", f"is larger than {MAX_SIZE} bytes")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _invalid(path, "the file", f"is not JSON ({e})") from None
    if not isinstance(document, dict):
        raise _invalid(path, "the file", "is not a JSON object")
    unknown = sorted(set(document) - {"default", "transports"})
    if unknown:
        raise _invalid(path, unknown[0], "is no field of a policy (default, transports)")
    if "default" not in document:
        raise _invalid(path, "default", "is missing (containers-policy.json(5) requires it)")
    default = _rule(document["default"], "default", path)
    transports = document.get("transports", {})
    if not isinstance(transports, dict):
        raise _invalid(path, "transports", "is not an object")
    parsed: dict[str, dict[str, Rule]] = {}
    for transport, scopes in transports.items():
        if not isinstance(scopes, dict):
            raise _invalid(path, f"transports.{transport}", "is not an object of scopes")
        parsed[transport] = {scope: _rule(requirements, f"transports.{transport}[{json.dumps(scope)}]", path)
                             for scope, requirements in scopes.items()}
    return Policy(path, default, parsed)


def _rule(requirements: object, where: str, path: str) -> Rule:
    if not isinstance(requirements, list) or not requirements:
        raise _invalid(path, where, "is not a non-empty list of requirements")
    types = []
    for index, requirement in enumerate(requirements):
        kind = requirement.get("type") if isinstance(requirement, dict) else None
        if kind in SIGNATURES:
            raise ConfigError(f"{path}: {where}[{index}] asks for a signature ({kind}), which hydria cannot "
                              "verify yet", hint="until it can, accept or reject that scope: "
                                                 f"{{\"type\": \"{ACCEPT}\"}} or {{\"type\": \"{REJECT}\"}}")
        if kind not in (ACCEPT, REJECT):
            raise _invalid(path, f"{where}[{index}]", f"has no known type (take {ACCEPT} or {REJECT})")
        types.append(kind)
    return Rule(where, tuple(types))


def _invalid(path: str, where: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {where} {problem}", hint="see containers-policy.json(5) and docs/security.md")


def _scopes(ref: ImageReference) -> tuple[str, list[str]]:
    """The transport of ``ref`` as policy.json names it, and its scopes, the most specific first."""
    if isinstance(ref, RegistryImage):
        host = "docker.io" if ref.registry == DOCKER_HUB else ref.registry
        repository = f"{host}/{ref.repository}"
        scopes = [repository + (f"@{ref.digest}" if ref.digest else f":{ref.tag or 'latest'}"), repository]
        parts = repository.split("/")
        scopes += ["/".join(parts[:count]) for count in range(len(parts) - 1, 0, -1)]
        labels = host.split(".")
        scopes += ["*." + ".".join(labels[count:]) for count in range(1, len(labels))]
        return "docker", scopes
    if isinstance(ref, EngineImage):
        return ("docker-daemon" if ref.engine == "docker" else "containers-storage"), [ref.image]
    assert isinstance(ref, LocalImage)
    path = os.path.abspath(ref.path)
    scopes = [f"{path}:{ref.ref}"] if ref.ref else []
    while True:
        scopes.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            return ref.scheme, scopes
        path = parent
