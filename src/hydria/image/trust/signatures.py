"""Cosign signatures of registry images, as cosign stores them and ``cosign verify --key``
checks them: the tag ``sha256-HEX.sig`` of the image's repository holds a manifest whose layers
are simple-signing payloads (JSON naming the signed manifest's digest and the repository), each
with its signature in the annotation ``dev.cosignproject.cosign/signature`` (base64). With OCI 1.1
referrers (``cosign sign --registry-referrers-mode=oci-1-1``) the same manifest, of the artifact
type ``SIGNATURE_ARTIFACT``, names the image as its ``subject`` and is found by the registry's
referrers API, or where the registry has none by the referrers tag ``sha256-HEX`` (an index of the
referrers, which the client that pushed them keeps). A payload
is trusted only once its signature verifies with the policy's public key (``cryptography``: ECDSA
P-256 with SHA-256 as cosign's keys, RSA PKCS#1 v1.5, Ed25519), and then only for the digest and
the repository it names.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable

from hydria.errors import HydriaError
from hydria.image.blobs.cache import is_digest
from hydria.record import Record

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"  # cosign's OCI 1.1 signatures
MAX_PAYLOAD = 64 << 10  # a payload is a few hundred bytes
MAX_SIGNATURES = 64  # a signature manifest with more layers is refused whole


class Signed(Record):
    """A payload and its signature, as the registry served them (not verified yet)."""

    payload: bytes
    signature: bytes


class SignatureError(HydriaError):
    """A signature artifact that is not one cosign writes."""


def referrers_tag(digest: str) -> str:
    """Where a registry without the referrers API keeps the index of the referrers of ``digest``."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def signature_tag(digest: str) -> str:
    """Where cosign stores the signatures of the manifest ``digest``."""
    return referrers_tag(digest) + ".sig"


def signature_referrers(document: object, where: str) -> list[str]:
    """The digests of the cosign signature manifests that a referrers index lists (its other
    artifacts, SBOMs and attestations, are no signatures). Raises SignatureError."""
    manifests = document.get("manifests") if isinstance(document, dict) else None
    if not isinstance(manifests, list):
        raise SignatureError(f"{where} is not an index of referrers (no manifests)")
    found = [entry.get("digest") for entry in manifests
             if isinstance(entry, dict) and entry.get("artifactType") == SIGNATURE_ARTIFACT]
    if len(found) > MAX_SIGNATURES:
        raise SignatureError(f"{where} lists {len(found)} signatures, more than {MAX_SIGNATURES}")
    if not all(is_digest(digest) for digest in found):
        raise SignatureError(f"{where}: a signature referrer without a sha256 digest")
    return [str(digest) for digest in found]


def layers_of(document: object, where: str) -> list[tuple[str, int, str]]:
    """The simple-signing layers of a signature manifest: (digest, size, base64 signature).
    Raises SignatureError for one that is not a manifest of such layers."""
    layers = document.get("layers") if isinstance(document, dict) else None
    if not isinstance(layers, list):
        raise SignatureError(f"{where} is not a signature manifest (no layers)")
    if len(layers) > MAX_SIGNATURES:
        raise SignatureError(f"{where} holds {len(layers)} signatures, more than {MAX_SIGNATURES}")
    found = []
    for layer in layers:
        if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING:
            continue  # another kind of attachment
        annotations = layer.get("annotations")
        signature = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
        digest, size = layer.get("digest"), layer.get("size")
        if not isinstance(signature, str) or not isinstance(digest, str) or not isinstance(size, int) \
                or not 0 < size <= MAX_PAYLOAD:
            raise SignatureError(f"{where}: a signature layer without a digest, a size up to {MAX_PAYLOAD} "
                                 "bytes and its signature")
        found.append((digest, size, signature))
    return found


def decoded(signature: str) -> bytes:
    """A signature annotation's bytes. Raises SignatureError."""
    try:
        return base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("a signature annotation is not base64") from None


def key_problem(key_pem: bytes) -> str | None:
    """Why ``key_pem`` is no public key a signature can be checked with; None when it is one."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    try:
        key = serialization.load_pem_public_key(key_pem)
    except (ValueError, UnsupportedAlgorithm):
        return "is no PEM public key (cosign public-key writes one)"
    if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
        return f"is a {type(key).__name__}, not an ECDSA, RSA or Ed25519 key"
    return None


def why_not(signed: Signed, key_pem: bytes, digests: set[str], identities: Callable[[str], bool],
            expected: str) -> str | None:
    """Why ``signed`` is no signature with ``key_pem`` of one of ``digests`` under an identity that
    ``identities`` takes (``expected`` says which, for the message); None when it is one."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    key = serialization.load_pem_public_key(key_pem)  # checked when the policy was read (key_problem)
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signed.signature, signed.payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signed.signature, signed.payload, padding.PKCS1v15(), hashes.SHA256())
        else:
            assert isinstance(key, ed25519.Ed25519PublicKey)  # the only other kind key_problem takes
            key.verify(signed.signature, signed.payload)
    except InvalidSignature:
        return "its signature does not verify with that key"
    try:
        critical = json.loads(signed.payload)["critical"]
        signed_digest = critical["image"]["docker-manifest-digest"]
        identity = critical["identity"]["docker-reference"]
    except (ValueError, KeyError, TypeError):
        return "its payload is not a cosign simple-signing payload"
    if signed_digest not in digests:
        return f"it signs {signed_digest}, not this image ({', '.join(sorted(digests))})"
    if not isinstance(identity, str) or not identities(identity):
        return f"it signs the image as {identity}, not as {expected}"
    return None


def private_key(path: str) -> object:
    """The PEM private key at ``path`` that ``hydria push --sign`` signs with (unencrypted, or
    with the passphrase in ``HYDRIA_SIGN_PASSPHRASE``). Raises HydriaError."""
    import os

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    from hydria.paths import open_binary

    try:
        with open_binary(path) as handle:
            data = handle.read(MAX_PAYLOAD)
    except OSError as e:
        raise HydriaError(f"--sign {path}: {e.strerror}", hint="give the PEM file of your signing key") from None
    passphrase = os.environ.get("HYDRIA_SIGN_PASSPHRASE")
    try:
        key = serialization.load_pem_private_key(data, passphrase.encode() if passphrase else None)
    except (ValueError, TypeError) as e:
        raise HydriaError(f"--sign {path} is no PEM private key hydria can read ({e})",
                          hint="make one with: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 "
                               "-out key.pem (cosign's own encrypted key files are not read); an encrypted "
                               "one takes its passphrase from HYDRIA_SIGN_PASSPHRASE") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey)):
        raise HydriaError(f"--sign {path} is a {type(key).__name__}, not an ECDSA, RSA or Ed25519 key")
    return key


def sign(key: object, digest: str, identity: str) -> tuple[bytes, str]:
    """A cosign simple-signing payload for the manifest ``digest`` as ``identity``, and its
    base64 signature by ``key`` (from :func:`private_key`)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    payload = json.dumps({"critical": {"identity": {"docker-reference": identity},
                                       "image": {"docker-manifest-digest": digest},
                                       "type": "cosign container image signature"},
                          "optional": None}).encode()
    if isinstance(key, ec.EllipticCurvePrivateKey):
        signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    elif isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(payload, padding.PKCS1v15(), hashes.SHA256())
    else:
        assert isinstance(key, ed25519.Ed25519PrivateKey)
        signature = key.sign(payload)
    return payload, base64.b64encode(signature).decode()
