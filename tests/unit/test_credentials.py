"""Registry credentials files: enroot's one-line entries, netrc's multi-line ones, ports, and the
hint that says what the file holds for a registry."""

from __future__ import annotations

from pathlib import Path

from hydria.image.sources.credentials import Credential, describe, find, parse_credentials


def test_one_line_and_multi_line_entries() -> None:
    text = ("# enroot's form\n"
            "machine nvcr.io login $oauthtoken password MY KEY with spaces\n"
            "\n"
            "machine registry.example.com\n"
            "    login ada\n"
            "    password $(pass show registry)\n"
            "machine incomplete.example.com\n"
            "machine 127.0.0.1:5000 login bob password s3cret\n")
    assert parse_credentials(text) == [
        Credential("nvcr.io", "$oauthtoken", "MY KEY with spaces"),
        Credential("registry.example.com", "ada", "$(pass show registry)"),
        Credential("127.0.0.1:5000", "bob", "s3cret"),
    ]


def test_an_entry_may_name_the_port() -> None:
    entries = parse_credentials("machine 127.0.0.1 login any password a\nmachine 127.0.0.1:5000 login bob password b\n")
    assert find(entries, "127.0.0.1:5000", None) == Credential("127.0.0.1:5000", "bob", "b")  # the port first
    assert find(entries, "127.0.0.1:6000", None) == Credential("127.0.0.1", "any", "a")
    assert find(entries, "127.0.0.1:6000", "bob") is None


def test_describe_says_which_file_and_entry(tmp_path: Path) -> None:
    path = tmp_path / ".credentials"
    assert describe([], path, "nvcr.io") == f"{path} does not exist"
    path.write_text("machine a.io login x password y\nmachine b.io login z password w\n")
    entries = parse_credentials(path.read_text())
    assert describe(entries, path, "nvcr.io") == f"{path} has no entry for nvcr.io (its machines: a.io, b.io)"
    assert describe(entries, path, "b.io:443") == f"{path} has an entry for b.io (login z)"
