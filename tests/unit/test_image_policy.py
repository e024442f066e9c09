"""The site's image policy (hydria/image/policy.py): containers' policy.json, its scopes from the
most specific to the default, and every policy it cannot honour refused with the field named."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from hydria.config import load_settings
from hydria.errors import ConfigError
from hydria.image.ref.reference import RegistryImage, parse
from hydria.image.trust import policy
from hydria.image.trust.signatures import Signed
from testbed.cosign import Key

ACCEPT = [{"type": "insecureAcceptAnything"}]
REJECT = [{"type": "reject"}]


def rule(document: dict[str, object], uri: str) -> str:
    return policy.parse(json.dumps(document), "/etc/hydria/policy.json").rule_for(parse(uri)).where


@pytest.mark.parametrize(("uri", "where"), [
    ("docker://nvcr.io#nvidia/pytorch:24.01-py3", 'transports.docker["nvcr.io/nvidia/pytorch:24.01-py3"]'),
    ("docker://nvcr.io#nvidia/pytorch:25.01-py3", 'transports.docker["nvcr.io/nvidia/pytorch"]'),
    ("docker://nvcr.io#nvidia/cuda:12", 'transports.docker["nvcr.io/nvidia"]'),
    ("docker://nvcr.io#other/x", 'transports.docker["nvcr.io"]'),
    ("docker://gitlab.lab.example.com#group/app:1", 'transports.docker["*.example.com"]'),
    ("docker://ubuntu:24.04", 'transports.docker["docker.io/library"]'),  # Docker Hub is docker.io there
    ("docker://quay.io#x/y", 'transports.docker[""]'),
    ("oci:///srv/images/app:v2", 'transports.oci["/srv/images"]'),
    ("oci:///home/me/app", "default"),
    ("docker-archive:///tmp/saved.tar", "default"),
])
def test_the_most_specific_scope_that_names_the_image_decides(uri: str, where: str) -> None:
    document = {"default": REJECT, "transports": {
        "docker": {"nvcr.io/nvidia/pytorch:24.01-py3": ACCEPT, "nvcr.io/nvidia/pytorch": REJECT,
                   "nvcr.io/nvidia": ACCEPT, "nvcr.io": REJECT, "*.example.com": ACCEPT,
                   "docker.io/library": ACCEPT, "": REJECT},
        "oci": {"/srv/images": ACCEPT}}}
    assert rule(document, uri) == where


@pytest.mark.parametrize(("document", "message"), [
    ("[]", "the file is not a JSON object"),
    ("{", "the file is not JSON"),
    ({"transports": {}}, "default is missing"),
    ({"default": []}, "default is not a non-empty list of requirements"),
    ({"default": ACCEPT, "transport": {}}, "transport is no field of a policy"),
    ({"default": [{"type": "acceptEverything"}]}, "default[0] has no known type"),
    ({"default": ACCEPT, "transports": {"docker": []}}, "transports.docker is not an object of scopes"),
    ({"default": ACCEPT, "transports": {"docker": {"nvcr.io": [{"type": "sigstoreSigned", "keyPath": "/nonexistent"}]}}},
     'transports.docker["nvcr.io"][0].keyPath /nonexistent: No such file or directory'),
    ({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k"}]},
     "default[0] asks for a GPG signature (signedBy), which hydria cannot verify"),
    ({"default": [{"type": "sigstoreSigned", "fulcio": {"caPath": "/ca"}, "rekorPublicKeyPath": "/r"}]},
     "default[0] asks for a keyless signature (Fulcio, Rekor)"),
    ({"default": [{"type": "sigstoreSigned", "keyData": "not base64!"}]}, "default[0].keyData is not base64"),
    ({"default": [{"type": "sigstoreSigned"}]}, "default[0] needs one of keyPath and keyData"),
    ({"default": [{"type": "sigstoreSigned", "keyPath": "relative.pub"}]}, "default[0].keyPath is not an absolute path"),
    ({"default": [{"type": "sigstoreSigned", "keyData": base64.b64encode(b"-----BEGIN").decode()}]},
     "default[0].keyData is no PEM public key"),
    ({"default": [{"type": "sigstoreSigned", "keyData": "", "signedIdentity": {"type": "remapIdentity"}}]},
     "default[0].signedIdentity is not one hydria checks"),
    ({"default": [{"type": "sigstoreSigned", "keyData": base64.b64encode(Key().public_pem).decode(), "keyPaths": ["/a"]}]},
     "default[0].keyPaths is no field hydria checks in sigstoreSigned"),
])
def test_a_policy_hydria_cannot_honour_is_refused_with_the_field_named(document: object, message: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(ConfigError) as raised:
        policy.parse(text, "/etc/hydria/policy.json")
    assert raised.value.message.startswith("/etc/hydria/policy.json: ") and message in raised.value.message
    assert raised.value.hint


def test_a_rejected_image_names_the_rule_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policy.json").write_text(json.dumps({"default": ACCEPT, "transports": {"docker": {"nvcr.io": REJECT}}}))
    monkeypatch.setenv("HYDRIA_SYSCONF_PATH", str(tmp_path))
    settings = load_settings()
    policy.check(parse("docker://quay.io#x/y"), settings)  # default: accepted
    with pytest.raises(policy.ImageRefused) as refused:
        policy.check(parse("docker://nvcr.io#nvidia/pytorch:24.01-py3"), settings)
    assert refused.value.message == (f"the site's image policy refuses docker://nvcr.io#nvidia/pytorch:24.01-py3: "
                                     f'transports.docker["nvcr.io"] in {tmp_path / "policy.json"} is "reject"')


def test_without_a_policy_every_image_enters_but_a_named_one_must_be_there(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDRIA_SYSCONF_PATH", str(tmp_path))
    assert policy.configured(load_settings()) is None
    monkeypatch.setenv("HYDRIA_POLICY_PATH", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="missing.json .HYDRIA_POLICY_PATH. is missing"):
        policy.configured(load_settings())


REPOSITORY = "registry.example.com/lab/train"
DIGEST, INDEX = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def signed_rule(key: Key, identity: str | None = None) -> policy.Rule:
    requirement: dict[str, object] = {"type": "sigstoreSigned",
                                      "keyData": base64.b64encode(key.public_pem).decode()}
    if identity:
        requirement["signedIdentity"] = {"type": identity}
    return policy.parse(json.dumps({"default": [requirement]}), "/etc/hydria/policy.json").default


def store(signatures: dict[str, list[tuple[bytes, str]]]) -> Callable[[str], list[Signed]]:
    return lambda digest: [Signed(payload, base64.b64decode(sig)) for payload, sig in signatures.get(digest, [])]


@pytest.mark.parametrize(("uri", "signed_digest", "identity", "rule_identity"), [
    (f"docker://{REPOSITORY.replace('/', '#', 1)}:1", DIGEST, f"{REPOSITORY}:1", None),  # exact, the default
    (f"docker://{REPOSITORY.replace('/', '#', 1)}:1", INDEX, f"{REPOSITORY}:1", None),  # the index signed
    (f"docker://{REPOSITORY.replace('/', '#', 1)}:1", DIGEST, REPOSITORY, "matchRepository"),  # as cosign names it
    (f"docker://{REPOSITORY.replace('/', '#', 1)}@{DIGEST}", DIGEST, REPOSITORY, None),  # by digest: the repository
])
def test_a_signature_by_the_policys_key_of_this_image_passes(uri: str, signed_digest: str, identity: str,
                                                             rule_identity: str | None) -> None:
    key = Key()
    ref = parse(uri)
    assert isinstance(ref, RegistryImage)
    said = policy.check_signed(signed_rule(key, rule_identity), ref, {DIGEST, INDEX},
                              [store({signed_digest: [key.sign(signed_digest, identity)]})])
    assert said.startswith("signed by the key of default[0].keyData as ")


def test_every_signature_that_does_not_pass_is_named_with_why() -> None:
    key, other = Key(), Key()
    ref = parse(f"docker://{REPOSITORY.replace('/', '#', 1)}:1")
    assert isinstance(ref, RegistryImage)
    payload, signature = key.sign(DIGEST, f"{REPOSITORY}:1")
    tampered = payload.replace(b"lab/train", b"lab/other")
    signatures = {DIGEST: [other.sign(DIGEST, f"{REPOSITORY}:1"),  # another key
                           key.sign("sha256:" + "3" * 64, f"{REPOSITORY}:1"),  # another image (a moved tag)
                           key.sign(DIGEST, f"{REPOSITORY}:2"),  # another tag
                           (tampered, signature),  # the payload changed after signing
                           (b"not json", base64.b64encode(key.private.sign(b"not json", ec.ECDSA(hashes.SHA256()))).decode())]}
    with pytest.raises(policy.ImageRefused) as refused:
        policy.check_signed(signed_rule(key), ref, {DIGEST, INDEX}, [store(signatures)])
    message = refused.value.message
    assert "signature 1: its signature does not verify with that key" in message
    assert f"signature 2: it signs sha256:{'3' * 64}, not this image" in message
    assert f"signature 3: it signs the image as {REPOSITORY}:2, not as {REPOSITORY}:1" in message
    assert "signature 4: its signature does not verify" in message
    assert "signature 5: its payload is not a cosign simple-signing payload" in message
    with pytest.raises(policy.ImageRefused, match=r"no signature passed: the registry has none \(sha256-1+\.sig nor"):
        policy.check_signed(signed_rule(key), ref, {DIGEST, INDEX}, [store({})])


def test_the_referrers_are_asked_only_while_no_signature_passed() -> None:
    """cosign's signature tag first: where a signature there passes, the referrers are never
    asked (two registry requests saved on every checked import); where none does, they are."""
    key = Key()
    ref = parse(f"docker://{REPOSITORY.replace('/', '#', 1)}:1")
    assert isinstance(ref, RegistryImage)
    asked: list[str] = []

    def referrers(digest: str) -> list[Signed]:
        asked.append(digest)
        return store({DIGEST: [key.sign(DIGEST, f"{REPOSITORY}:1")]})(digest)

    policy.check_signed(signed_rule(key), ref, {DIGEST, INDEX}, [store({DIGEST: [key.sign(DIGEST, f"{REPOSITORY}:1")]}),
                                                                  referrers])
    assert asked == []
    said = policy.check_signed(signed_rule(key), ref, {DIGEST, INDEX}, [store({DIGEST: [Key().sign(DIGEST, "x")]}),
                                                                         referrers])
    assert said.startswith("signed by the key of") and sorted(asked) == sorted({DIGEST, INDEX})


def test_an_image_the_policy_wants_signed_must_come_from_a_registry(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key = base64.b64encode(Key().public_pem).decode()
    (tmp_path / "policy.json").write_text(json.dumps({"default": [{"type": "sigstoreSigned", "keyData": key}]}))
    monkeypatch.setenv("HYDRIA_SYSCONF_PATH", str(tmp_path))
    with pytest.raises(policy.ImageRefused, match="only a registry image carries cosign signatures"):
        policy.check(parse("oci:///srv/layout"), load_settings())
