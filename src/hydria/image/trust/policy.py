"""The site's image policy: which images may enter this cluster, in the format of containers'
``policy.json`` (containers-policy.json(5)), so that a site that runs podman can reuse its own.

A policy gives each image a list of requirements, every one of which must accept it: the list of
the most specific scope that names the image in ``transports`` (for ``docker``: the repository
with its tag or digest, the repository, each namespace above it, the registry, ``*.DOMAIN``
wildcards of the registry; for local files: the path and each folder above it), else the
transport's ``""``, else ``default``. Checked before anything of the image is read, wherever
images enter: ``import``, ``load``, a Slurm step's import, ``store import``, ``build``'s ``FROM``
(docs/security.md, "Which images may enter").

Requirements: ``insecureAcceptAnything``, ``reject``, and ``sigstoreSigned`` with a public key
(``keyPath`` or ``keyData``): a cosign signature of the image's manifest (or of its index) by that
key, under the identity ``signedIdentity`` asks (``matchRepoDigestOrExact``, the default, or
``matchRepository``), checked once the reference is resolved to its digest and before the image
store or the cache is asked for it (image/trust/signatures.py). What hydria cannot check is
refused as a whole, naming the rule, so that a requirement never passes for one it did not
check: ``signedBy`` (GPG simple signing), keyless ``sigstoreSigned`` (Fulcio and Rekor), other
identities.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from hydria.config import Settings
from hydria.errors import ConfigError, HydriaError
from hydria.image.ref.reference import (
    EngineImage,
    ImageReference,
    LocalImage,
    RegistryImage,
)
from hydria.image.trust.signatures import Signed, key_problem, signature_tag
from hydria.image.trust.signatures import why_not as signatures_why_not
from hydria.log import Logger
from hydria.paths import read_text
from hydria.record import Record

ACCEPT = "insecureAcceptAnything"
REJECT = "reject"
SIGNED = "sigstoreSigned"
MATCH_REPO_DIGEST_OR_EXACT, MATCH_REPOSITORY = "matchRepoDigestOrExact", "matchRepository"
KEYLESS = ("fulcio", "rekorPublicKeyPath", "rekorPublicKeyData", "pki")
MAX_SIZE = 1 << 20
FILE_NAME = "policy.json"  # in HYDRIA_SYSCONF_PATH, where HYDRIA_POLICY_PATH names none

log = Logger(__name__)


class ImageRefused(HydriaError):
    """The site's policy does not let the image in."""


class Requirement(Record):
    kind: str  # ACCEPT, REJECT, SIGNED
    key: bytes = b""  # SIGNED: the PEM public key
    key_from: str = ""  # where the policy gave it (keyPath's file, or keyData)
    identity: str = MATCH_REPO_DIGEST_OR_EXACT


class Rule(Record):
    where: str  # how the policy file names it: default, transports.docker["nvcr.io"]
    requirements: tuple[Requirement, ...]
    asked_by: str = "the site's image policy"  # or hydria verify --key

    @property
    def signed(self) -> tuple[Requirement, ...]:
        return tuple(r for r in self.requirements if r.kind == SIGNED)


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


def _identity_matches(identity: str, *, expected: str, by_repository: bool) -> bool:
    """Whether a signature's identity is ``expected``: with ``by_repository``, its repository
    (the identity without its tag or digest)."""
    if by_repository:
        head, _, last = identity.partition("@")[0].rpartition("/")
        identity = f"{head}/{last.partition(':')[0]}" if head else last.partition(":")[0]
    return identity == expected


def policy_file(settings: Settings) -> str:
    """Where the site's policy is: HYDRIA_POLICY_PATH, else HYDRIA_SYSCONF_PATH/policy.json."""
    return settings.policy_path or os.path.join(settings.sysconf_path, FILE_NAME)


def configured(settings: Settings) -> Policy | None:
    """The site's policy: the file HYDRIA_POLICY_PATH names (it must be there), else
    HYDRIA_SYSCONF_PATH/policy.json where there is one; None without either.

    Raises:
        ConfigError: a policy file that cannot be read, is no policy, or asks what hydria cannot check.
    """
    path = policy_file(settings)
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


def check(ref: ImageReference, settings: Settings) -> Rule | None:
    """Raise ImageRefused unless the site's policy may let ``ref`` in (ConfigError for a bad
    policy); the rule, whose signature requirements :func:`check_signed` checks once the
    reference is resolved (None without a policy)."""
    policy = configured(settings)
    if policy is None:
        return None
    rule = policy.rule_for(ref)
    if any(r.kind == REJECT for r in rule.requirements):
        raise ImageRefused(f"the site's image policy refuses {ref.uri}: {rule.where} in {policy.path} is \"reject\"",
                           hint="ask the administrator to allow the registry or repository, or use an image "
                                "from one the policy accepts")
    if rule.signed and not isinstance(ref, RegistryImage):
        raise ImageRefused(f"the site's image policy wants {ref.uri} signed ({rule.where} in {policy.path}), and "
                           "only a registry image carries cosign signatures", hint="import it from a registry")
    return rule


class SignatureSource(Protocol):
    """Where an image's signatures come from (image/sources/registry.py's RegistrySource)."""

    def tag_digest(self) -> str: ...

    def tag_signatures(self, digest: str) -> list[Signed]: ...

    def referrer_signatures(self, digest: str) -> list[Signed]: ...


def signature_finders(source: SignatureSource) -> tuple[Callable[[str], list[Signed]], ...]:
    """Where :func:`check_signed` looks, in order: cosign's signature tag (its default), then
    the OCI 1.1 referrers (asked only while no signature passed)."""
    return source.tag_signatures, source.referrer_signatures


def check_source(rule: Rule | None, ref: RegistryImage, source: SignatureSource, digest: str) -> None:
    """:func:`check_signed` for the manifest ``digest`` that ``source`` resolved (or the index
    the reference names), said in the log once it passed: every place images enter calls this."""
    passed = check_signed(rule, ref, {digest, source.tag_digest()}, signature_finders(source))
    if passed:
        log.info("Verified %s: %s", ref.uri, passed)


def check_signed(rule: Rule | None, ref: RegistryImage, digests: set[str],
                 finders: Sequence[Callable[[str], list[Signed]]]) -> str:
    """Raise ImageRefused unless every signature requirement of ``rule`` has a signature of one
    of ``digests`` (the tag's and the platform's manifest) among what ``finders`` find for them,
    each asked (in order) only while no signature passed; what passed, for the log (empty
    without a requirement)."""
    if rule is None or not rule.signed:
        return ""
    found: list[Signed] = []
    unasked = list(finders)
    passed = []
    for requirement in rule.signed:
        # matchRepoDigestOrExact: the repository for an image named by digest, else the exact name
        by_repository = requirement.identity == MATCH_REPOSITORY or bool(ref.digest)
        expected = ref.name if by_repository else ref.exact_name
        identity_ok = partial(_identity_matches, expected=expected, by_repository=by_repository)
        while True:
            reasons = [why for signed in found
                       if (why := signatures_why_not(signed, requirement.key, digests, identity_ok, expected))]
            if len(reasons) < len(found) or not unasked:
                break
            find = unasked.pop(0)
            found += [signed for digest in sorted(digests) for signed in find(digest)]
        if len(reasons) == len(found):
            said = "; ".join(f"signature {index + 1}: {why}" for index, why in enumerate(reasons)) or \
                f"the registry has none ({' nor '.join(signature_tag(d) for d in sorted(digests))}, nor referrers)"
            raise ImageRefused(f"{rule.asked_by} wants {ref.uri} signed by the key of "
                               f"{requirement.key_from} ({rule.where}), and no signature passed: {said}",
                               hint="sign it with that key (cosign sign --key, or hydria push --sign), or ask "
                                    "the administrator which key signs this repository")
        passed.append(f"signed by the key of {requirement.key_from} as {expected}")
    return "; ".join(passed)


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
    return Rule(where, tuple(_requirement(r, f"{where}[{index}]", path) for index, r in enumerate(requirements)))


def _requirement(requirement: object, where: str, path: str) -> Requirement:
    kind = requirement.get("type") if isinstance(requirement, dict) else None
    if kind in (ACCEPT, REJECT):
        return Requirement(kind)
    if kind == "signedBy":
        raise ConfigError(f"{path}: {where} asks for a GPG signature (signedBy), which hydria cannot verify",
                          hint=f"sign with cosign and ask for {SIGNED} with its public key, or accept or reject "
                               "that scope")
    if kind != SIGNED:
        raise _invalid(path, where, f"has no known type (take {ACCEPT}, {REJECT} or {SIGNED})")
    assert isinstance(requirement, dict)
    if any(field in requirement for field in KEYLESS):
        raise ConfigError(f"{path}: {where} asks for a keyless signature (Fulcio, Rekor), which hydria cannot "
                          "verify yet", hint="ask for a signature by a public key (keyPath or keyData)")
    identity = requirement.get("signedIdentity", {"type": MATCH_REPO_DIGEST_OR_EXACT})
    kind_of_identity = identity.get("type") if isinstance(identity, dict) else None
    if kind_of_identity not in (MATCH_REPO_DIGEST_OR_EXACT, MATCH_REPOSITORY) or len(identity) != 1:
        raise _invalid(path, f"{where}.signedIdentity",
                       f"is not one hydria checks (take {MATCH_REPO_DIGEST_OR_EXACT} or {MATCH_REPOSITORY})")
    if ("keyPath" in requirement) == ("keyData" in requirement):
        raise _invalid(path, where, "needs one of keyPath and keyData (a PEM public key)")
    if "keyPath" in requirement:
        key_path = requirement["keyPath"]
        if not isinstance(key_path, str) or not os.path.isabs(key_path):
            raise _invalid(path, f"{where}.keyPath", "is not an absolute path")
        try:
            key = read_text(key_path).encode()
        except OSError as e:
            raise ConfigError(f"{path}: {where}.keyPath {key_path}: {e.strerror}",
                              hint="the administrator installs the key there, readable by every user") from None
        key_from = key_path
    else:
        try:
            key = base64.b64decode(str(requirement["keyData"]), validate=True)
        except (binascii.Error, ValueError):
            raise _invalid(path, f"{where}.keyData", "is not base64") from None
        key_from = f"{where}.keyData"
    problem = key_problem(key)
    if problem:
        raise _invalid(path, f"{where}.{'keyPath' if 'keyPath' in requirement else 'keyData'}", problem)
    unknown = sorted(set(requirement) - {"type", "keyPath", "keyData", "signedIdentity"})
    if unknown:
        raise _invalid(path, f"{where}.{unknown[0]}", f"is no field hydria checks in {SIGNED}")
    return Requirement(SIGNED, key, key_from, kind_of_identity)


def _invalid(path: str, where: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {where} {problem}", hint="see containers-policy.json(5) and docs/security.md")


def _scopes(ref: ImageReference) -> tuple[str, list[str]]:
    """The transport of ``ref`` as policy.json names it, and its scopes, the most specific first."""
    if isinstance(ref, RegistryImage):
        host = ref.name.partition("/")[0]
        scopes = [ref.exact_name, ref.name]
        parts = ref.name.split("/")
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
