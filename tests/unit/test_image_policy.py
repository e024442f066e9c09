"""The site's image policy (hydria/image/policy.py): containers' policy.json, its scopes from the
most specific to the default, and every policy it cannot honour refused with the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hydria.config import load_settings
from hydria.errors import ConfigError
from hydria.image import policy
from hydria.image.ref.reference import parse

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
    ({"default": ACCEPT, "transports": {"docker": {"nvcr.io": [{"type": "sigstoreSigned", "keyPath": "/k"}]}}},
     'transports.docker["nvcr.io"][0] asks for a signature (sigstoreSigned), which hydria cannot verify yet'),
    ({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k"}]},
     "default[0] asks for a signature (signedBy)"),
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
