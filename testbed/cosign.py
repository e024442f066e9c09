"""Cosign signatures made in the tests, in the format ``cosign sign --key`` writes (its
documented simple-signing payload, the ``sha256-HEX.sig`` tag, the signature annotation), or as
an OCI 1.1 referrer (``--registry-referrers-mode=oci-1-1``: the same manifest with the image as its
subject, pushed by digest, and the referrers tag's index that a client keeps for a registry without
the referrers API, as the test registry is): keys generated here with ``cryptography``, pushed to
the test registry with the distribution API."""

from __future__ import annotations

import base64
import hashlib
import json

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hydria.image.trust.signatures import (
    SIGNATURE_ANNOTATION,
    SIGNATURE_ARTIFACT,
    SIMPLE_SIGNING,
    referrers_tag,
    signature_tag,
)
from testbed.oci import OCI_INDEX, OCI_MANIFEST, upload_data


class Key:
    """An ECDSA P-256 key pair, as ``cosign generate-key-pair`` makes."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, digest: str, identity: str) -> tuple[bytes, str]:
        """A payload that signs the manifest ``digest`` as ``identity``, and its base64 signature."""
        payload = json.dumps({"critical": {"identity": {"docker-reference": identity},
                                           "image": {"docker-manifest-digest": digest},
                                           "type": "cosign container image signature"},
                              "optional": None}).encode()
        return payload, base64.b64encode(self.private.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()


def push_signatures(registry: str, repository: str, digest: str, signed: list[tuple[bytes, str]]) -> None:
    """Store ``signed`` (payloads and signatures) as cosign does: the ``sha256-HEX.sig`` tag."""
    with httpx.Client(base_url=f"http://{registry}", timeout=60) as client:
        manifest = _signature_manifest(client, repository, signed, "application/vnd.oci.image.config.v1+json")
        _put(client, repository, signature_tag(digest), json.dumps(manifest).encode())


def push_referrer_signatures(registry: str, repository: str, subject: dict[str, object],
                             signed: list[tuple[bytes, str]], artifact_type: str = SIGNATURE_ARTIFACT,
                             others: tuple[dict[str, object], ...] = ()) -> dict[str, object]:
    """Store ``signed`` as an OCI 1.1 referrer of the manifest ``subject`` (its descriptor:
    mediaType, digest, size), of ``artifact_type``, with the referrers tag's index listing it after
    ``others`` (the entries of referrers pushed before); its entry in that index."""
    with httpx.Client(base_url=f"http://{registry}", timeout=60) as client:
        manifest = _signature_manifest(client, repository, signed, artifact_type)
        data = json.dumps({**manifest, "subject": subject}).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        _put(client, repository, digest, data)
        entry = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(data), "artifactType": artifact_type}
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*others, entry]}
        _put(client, repository, referrers_tag(str(subject["digest"])), json.dumps(index).encode(), OCI_INDEX)
    return entry


def _signature_manifest(client: httpx.Client, repository: str, signed: list[tuple[bytes, str]],
                        config_type: str) -> dict[str, object]:
    config = b"{}"
    layers = [{"mediaType": SIMPLE_SIGNING, "digest": upload_data(client, repository, payload),
               "size": len(payload), "annotations": {SIGNATURE_ANNOTATION: signature}}
              for payload, signature in signed]
    return {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": upload_data(client, repository, config), "size": len(config)},
            "layers": layers}


def _put(client: httpx.Client, repository: str, reference: str, data: bytes, media_type: str = OCI_MANIFEST) -> None:
    response = client.put(f"/v2/{repository}/manifests/{reference}", content=data, headers={"Content-Type": media_type})
    response.raise_for_status()
