"""Cosign signatures made in the tests, in the format ``cosign sign --key`` writes (its
documented simple-signing payload, the ``sha256-HEX.sig`` tag, the signature annotation):
keys generated here with ``cryptography``, pushed to the test registry with the distribution API."""

from __future__ import annotations

import base64
import json

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hydria.image.trust.signatures import SIGNATURE_ANNOTATION, SIMPLE_SIGNING, signature_tag
from testbed.oci import upload_data

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


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
        config = b"{}"
        layers = []
        for payload, signature in signed:
            layers.append({"mediaType": SIMPLE_SIGNING, "digest": upload_data(client, repository, payload),
                           "size": len(payload), "annotations": {SIGNATURE_ANNOTATION: signature}})
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": upload_data(client, repository, config), "size": len(config)},
                    "layers": layers}
        response = client.put(f"/v2/{repository}/manifests/{signature_tag(digest)}", content=json.dumps(manifest),
                              headers={"Content-Type": OCI_MANIFEST})
        response.raise_for_status()

