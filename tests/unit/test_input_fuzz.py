"""Property-based fuzzing of the parsers that take user or image input: each either parses or
raises its clear error (a HydriaError), never anything else; bounded so the suite stays quick."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.container.named import validate_name
from hydria.errors import HydriaError
from hydria.image.ref.reference import parse as parse_reference
from hydria.runtime import environ

_ANY_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("\udcff\x00\n\t /:#@"), max_size=60)
_URI_PIECES = st.lists(st.sampled_from(["docker://", "oci://", "oci-archive://", "dockerd://", "podman://",
                                        "user@", "127.0.0.1:5000", "127..0.1", "127.04.0.1", "[::1]", "#",
                                        "library/", "ubuntu", ":", "22.04", "@sha256:", "a" * 64, "/", ".."]),
                       max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(_URI_PIECES | _ANY_TEXT)
def test_any_image_reference_parses_or_is_a_clear_error(uri: str) -> None:
    try:
        parse_reference(uri)
    except HydriaError:
        pass


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT)
def test_any_environment_file_parses(text: str) -> None:
    for name, _ in environ.parse_env_lines(text):
        assert environ.is_name(name)


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT)
def test_any_container_name_is_valid_or_a_clear_error(name: str) -> None:
    try:
        validate_name(name)
    except HydriaError as e:
        e.message.encode()  # printable: no lone surrogates in the message
        return
    name.encode()
    assert "/" not in name and name not in ("", ".", "..")


@pytest.mark.parametrize("name", ["bad\udcffname", "a\nb", "tab\there", "", "..", "a/b"])
def test_names_that_cannot_be_containers(name: str) -> None:
    with pytest.raises(HydriaError, match="Invalid argument"):
        validate_name(name)


@pytest.mark.parametrize("registry", ["127..0.1", "127.04.0.1", "999.1.1.1", "host:0", "host:65536", "-a.io",
                                      "a_b.io"])
def test_registry_addresses_that_cannot_be_reached_are_clear_errors(registry: str) -> None:
    with pytest.raises(HydriaError, match="is not a registry address"):
        parse_reference(f"docker://{registry}#library/ubuntu:22.04")


@pytest.mark.parametrize("registry", ["127.0.0.1:5000", "localhost:5000", "nvcr.io", "my-registry.example.com:443",
                                      "10.0.0.1"])
def test_registry_addresses(registry: str) -> None:
    assert parse_reference(f"docker://{registry}#library/ubuntu:22.04").registry == registry  # type: ignore[union-attr]
