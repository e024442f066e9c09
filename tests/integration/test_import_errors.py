"""Bad input and bad luck: each gives one clear error, a non-zero exit, and leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hydria.image.ref.manifest import ACCEPT
from testbed.cosign import Key, push_referrer_signatures, push_signatures
from testbed.publish import PublishedImage, push_as
from testbed.referrersfront import ReferrersFront
from testbed.registry import Registry, free_port
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def fails(workspace: Workspace, *args: str, **env: str) -> str:
    result = workspace.run("import", *args, **env)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("[ERROR] "), result.stderr
    assert list(workspace.out.iterdir()) == [], "a failed import left files behind"
    return result.stderr


@pytest.mark.parametrize(("uri", "message"), [
    ("ubuntu", "Invalid argument: ubuntu"),
    ("shub://x/y", "Invalid argument: shub://x/y"),
    ("docker://Ubuntu:22.04", "Invalid image reference: docker://Ubuntu:22.04"),
    ("docker://reg.io#a/b@sha256:123", "Invalid image reference"),
])
def test_malformed_uris(uri: str, message: str, workspace: Workspace) -> None:
    assert message in fails(workspace, uri)


def test_usage_errors_exit_1(workspace: Workspace) -> None:
    for args in ((), ("--output",), ("--bogus", "docker://x"), ("a", "b")):
        result = workspace.run("import", *args)
        assert result.returncode == 1, args


def test_missing_tag_and_repository(busybox: PublishedImage, workspace: Workspace) -> None:
    err = fails(workspace, f"docker://{busybox.registry}#{busybox.repository}:no-such-tag")
    assert f"/v2/{busybox.repository}/manifests/no-such-tag returned error code: 404 Not Found" in err
    assert "hydria/busybox:no-such-tag does not exist" in err
    nothing = fails(workspace, f"docker://{busybox.registry}#hydria/nothing-here")
    assert "404 Not Found" in nothing and "library/" not in nothing


def test_a_one_part_name_that_is_missing_suggests_the_official_images_folder(workspace: Workspace,
                                                                              busybox: PublishedImage) -> None:
    """A mirror of Docker Hub keeps its official images under library/, which only Docker Hub's
    own names get by themselves: a one-part name that is not there says which name to try."""
    err = fails(workspace, f"docker://{busybox.registry}#ubuntu:24.04")
    assert "ubuntu:24.04 does not exist" in err
    assert f"Docker Hub's official images are library/NAME there: try {busybox.registry}#library/ubuntu" in err


def test_digest_reference(busybox: PublishedImage, workspace: Workspace) -> None:
    result = workspace.run("import", f"docker://{busybox.registry}#{busybox.repository}@{busybox.digest}")
    assert result.returncode == 0, result.stderr
    assert (workspace.out / f"hydria+busybox+{busybox.digest}.sqsh").exists()


def test_unreachable_registry(workspace: Workspace) -> None:
    port = free_port()
    err = fails(workspace, f"docker://127.0.0.1:{port}#a/b")
    assert f"Could not connect to registry 127.0.0.1:{port}" in err


def test_plain_http_needs_the_setting(busybox: PublishedImage, workspace: Workspace) -> None:
    err = fails(workspace, busybox.docker_uri, HYDRIA_ALLOW_HTTP="n")
    assert "Could not connect to registry" in err and "HYDRIA_ALLOW_HTTP=y" in err


def test_existing_output_is_never_overwritten(busybox: PublishedImage, workspace: Workspace) -> None:
    target = workspace.out / "keep.sqsh"
    target.write_text("precious")
    os.chown(target, workspace.user.uid, workspace.user.gid)
    result = workspace.run("import", "-o", "keep.sqsh", busybox.docker_uri)
    assert result.returncode == 1
    assert f"File already exists: {target}" in result.stderr
    assert target.read_text() == "precious"


def test_output_directory_must_exist(busybox: PublishedImage, workspace: Workspace) -> None:
    err = fails(workspace, "-o", "no/such/dir/x.sqsh", busybox.docker_uri)
    assert f"No such file or directory: {workspace.out}/no/such/dir" in err
    assert "hint: make the folder first, or choose another --output" in err


def test_output_directory_must_be_writable(busybox: PublishedImage, workspace: Workspace) -> None:
    locked = workspace.root / "locked"
    locked.mkdir(mode=0o555)
    err = fails(workspace, "-o", str(locked / "x.sqsh"), busybox.docker_uri)
    assert f"Permission denied: {locked}" in err and "Errno" not in err
    assert "hint: choose an --output in a directory you can write" in err
    assert list(locked.iterdir()) == []


def test_output_in_a_folder_that_cannot_be_searched(busybox: PublishedImage, workspace: Workspace) -> None:
    """/root/x.sqsh as a user: the file cannot even be looked up (a bare OSError before)."""
    err = fails(workspace, "-o", "/root/x.sqsh", busybox.docker_uri)
    assert "Permission denied: /root\n" in err and "hint: choose an --output in a directory you can write" in err


@pytest.mark.parametrize("scheme", ["oci-archive", "docker-archive"])
def test_corrupt_archive(scheme: str, workspace: Workspace, images: dict[str, Path]) -> None:
    """One line that says what the file is, not tarfile's five-line account of its attempts."""
    junk = workspace.root / "junk.tar"
    junk.write_bytes(os.urandom(5000))
    err = fails(workspace, f"{scheme}://{junk}")
    assert f"Invalid image format: {junk}: not a tar archive (plain, gzip, bzip2 or xz)" in err
    assert "ReadError" not in err and len(err.splitlines()) == 2
    err = fails(workspace, f"{scheme}://{images['busybox']}")
    assert f"{images['busybox']} is a squashfs image, not an archive" in err and "it needs no import" in err


def test_missing_local_path(workspace: Workspace) -> None:
    assert "No such file or directory: /nonexistent/layout" in fails(workspace, "oci:///nonexistent/layout")


def test_unsupported_squash_option(busybox: PublishedImage, workspace: Workspace) -> None:
    err = fails(workspace, busybox.docker_uri, HYDRIA_SQUASH_OPTIONS="-comp zstd -sort file")
    assert "HYDRIA_SQUASH_OPTIONS: -sort is not supported" in err


@pytest.fixture
def small_disk(workspace: Workspace) -> Iterator[Path]:
    """A 2 MiB tmpfs the test user may write to."""
    mount = workspace.root / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=2m,uid={workspace.user.uid}", "tmpfs", str(mount)],
                   check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_full_disk(debian: PublishedImage, workspace: Workspace, small_disk: Path) -> None:
    result = workspace.run("import", "-o", str(small_disk / "debian.sqsh"), debian.docker_uri)
    assert result.returncode == 1
    folder = small_disk.resolve()
    assert "tar2sqfs failed" in result.stderr and f"({folder}: No space left on device)" in result.stderr, result.stderr
    assert f"make room on the file system of {folder}" in result.stderr
    assert list(small_disk.iterdir()) == []


def test_full_cache_disk_names_the_path(debian: PublishedImage, workspace: Workspace, small_disk: Path) -> None:
    cache = small_disk / "cache"
    result = workspace.run("import", "-o", "debian.sqsh", debian.docker_uri, HYDRIA_CACHE_PATH=str(cache))
    assert result.returncode == 1 and "Traceback" not in result.stderr and "[Errno 28]" not in result.stderr
    assert f"cannot write {cache}/blobs/sha256/" in result.stderr and "No space left on device" in result.stderr
    assert f"free space in {cache} (HYDRIA_CACHE_PATH)" in result.stderr
    assert list(workspace.out.iterdir()) == []
    cache_is_consistent(cache)  # no partial blob


def cache_is_consistent(cache: Path) -> None:
    for blob in (cache / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, f"corrupt cache entry {blob}"


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6])
def test_killed_import_leaves_nothing_and_reruns(fraction: float, debian: PublishedImage,
                                                 workspace: Workspace) -> None:
    """Killed at a fraction of the time a whole cold import takes (measured with another cache)."""
    started = time.monotonic()
    reference = workspace.run("import", "-o", "reference.sqsh", debian.docker_uri,
                              HYDRIA_CACHE_PATH=str(workspace.root / "reference-cache"))
    assert reference.returncode == 0, reference.stderr
    duration = time.monotonic() - started
    (workspace.out / "reference.sqsh").unlink()
    process = workspace.popen("import", "-o", "killed.sqsh", debian.docker_uri)
    time.sleep(duration * fraction)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the import ended before it was killed"
    time.sleep(0.5)  # tar2sqfs sees its input end and exits
    assert list(workspace.out.iterdir()) == []
    if workspace.cache.exists():
        cache_is_consistent(workspace.cache)
    rerun = workspace.run("import", "-o", "killed.sqsh", debian.docker_uri)
    assert rerun.returncode == 0, rerun.stderr
    cache_is_consistent(workspace.cache)


def test_an_image_the_site_policy_rejects_enters_nowhere(busybox: PublishedImage, workspace: Workspace) -> None:
    """The site's policy.json, in HYDRIA_SYSCONF_PATH: import, load and build's FROM refuse the
    rejected repository before asking the registry for anything, and name the rule; another
    image of the same registry enters."""
    etc = workspace.root / "etc"
    etc.mkdir(exist_ok=True)
    scope = f"{busybox.registry}/{busybox.repository}"
    (etc / "policy.json").write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                                 "transports": {"docker": {scope: [{"type": "reject"}]}}}))
    rule = f'transports.docker["{scope}"] in {etc / "policy.json"} is "reject"'
    assert rule in fails(workspace, busybox.docker_uri)
    loaded = workspace.run("load", "--name", "refused", busybox.docker_uri)
    assert loaded.returncode == 1 and rule in loaded.stderr and workspace.run("list").stdout == ""
    context = workspace.root / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {scope}:{busybox.tag}\nRUN true\n")
    os.chown(context, workspace.user.uid, workspace.user.gid)
    built = workspace.run("build", "-o", str(workspace.root / "built.sqsh"), str(context))
    assert built.returncode == 1 and rule in built.stderr and not (workspace.root / "built.sqsh").exists()
    assert not (workspace.cache / "blobs").exists() or not any((workspace.cache / "blobs").rglob("*"))
    (etc / "policy.json").write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                                 "transports": {"docker": {f"{scope}:other": [{"type": "reject"}]}}}))
    assert workspace.run("import", busybox.docker_uri).returncode == 0  # another tag's rule: not this one's


def test_an_image_the_site_policy_wants_signed_enters_with_a_cosign_signature_by_its_key(
        busybox: PublishedImage, registry: Registry, image_workdir: Path, workspace: Workspace) -> None:
    """sigstoreSigned with a key: the image of a repository of the test's own, signed as cosign
    signs (testbed/cosign.py), enters by import and build's FROM; signed by another
    key, or not at all, it is refused with why, and nothing is kept."""
    signed_uri = push_as(busybox, registry, "signed-by-ci", image_workdir)
    unsigned_uri = push_as(busybox, registry, "never-signed", image_workdir)
    repository = f"{registry.address}/hydria/signed-by-ci"
    key, stranger = Key(), Key()
    push_signatures(registry.address, "hydria/signed-by-ci", busybox.digest,
                    [stranger.sign(busybox.digest, f"{repository}:latest"), key.sign(busybox.digest, f"{repository}:latest")])
    etc = workspace.root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "ci.pub").write_bytes(key.public_pem)
    (etc / "policy.json").write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {
        f"{registry.address}/hydria": [{"type": "sigstoreSigned", "keyPath": str(etc / "ci.pub")}]}}}))
    refused = fails(workspace, unsigned_uri)
    assert "wants docker://" in refused and "no signature passed: the registry has none (sha256-" in refused
    imported = workspace.run("import", "-o", "signed.sqsh", signed_uri)
    assert imported.returncode == 0, imported.stderr
    assert "Verified docker://" in imported.stderr, imported.stderr
    assert f"signed by the key of {etc / 'ci.pub'} as {repository}:latest" in imported.stderr
    context = workspace.root / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {repository}:latest\nRUN true\n")
    os.chown(context, workspace.user.uid, workspace.user.gid)
    built = workspace.run("build", "-o", str(workspace.root / "built.sqsh"), str(context))
    assert built.returncode == 0, built.stderr
    verified = workspace.run("verify", "--json", "signed.sqsh")  # the image's record, checked again
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout) == {
        "image": "signed.sqsh", "reference": f"docker://{registry.address}#hydria/signed-by-ci:latest",
        "digest": busybox.digest, "rule": f'transports.docker["{registry.address}/hydria"] in {etc / "policy.json"}',
        "signed": f"signed by the key of {etc / 'ci.pub'} as {repository}:latest"}
    (workspace.root / "stranger.pub").write_bytes(stranger.public_pem)
    (workspace.root / "other.pub").write_bytes(Key().public_pem)
    by_key = workspace.run("verify", "--key", str(workspace.root / "stranger.pub"), "signed.sqsh")
    assert by_key.returncode == 0 and f"Signed: signed by the key of {workspace.root / 'stranger.pub'}" in \
        by_key.stdout, by_key.stdout + by_key.stderr
    not_by_key = workspace.run("verify", "--key", str(workspace.root / "other.pub"), "signed.sqsh")
    assert not_by_key.returncode == 1 and not_by_key.stdout == "", not_by_key.stdout
    assert f"hydria verify wants docker://{registry.address}#hydria/signed-by-ci:latest signed by the key of " \
        f"{workspace.root / 'other.pub'} (--key {workspace.root / 'other.pub'}), and no signature passed: signature " \
        "1: its signature does not verify with that key; signature 2:" in not_by_key.stderr, not_by_key.stderr
    (etc / "ci.pub").write_bytes(Key().public_pem)  # the site's key changed: neither signature is by it
    again = workspace.run("verify", "signed.sqsh")
    assert again.returncode == 1 and "the site's image policy wants docker://" in again.stderr, again.stderr
    (workspace.out / "signed.sqsh").unlink()
    other_key = fails(workspace, signed_uri)
    assert "signature 1: its signature does not verify with that key" in other_key
    assert "signature 2: its signature does not verify with that key" in other_key


def test_a_signature_stored_as_an_oci_referrer_passes_and_other_referrers_are_no_signatures(
        busybox: PublishedImage, registry: Registry, image_workdir: Path, workspace: Workspace) -> None:
    """cosign's OCI 1.1 mode: the signature manifest names the image as its subject, listed by the
    referrers tag's index (the test registry has no referrers API: the pushing client keeps that
    index), or found by the referrers API (the same registry behind a front that has one). A
    referrer of another artifact type is no signature, whatever it holds."""
    uri = push_as(busybox, registry, "referred", image_workdir)
    repository = "hydria/referred"
    key = Key()
    with ReferrersFront(registry.address) as front:
        etc = workspace.root / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "ci.pub").write_bytes(key.public_pem)
        rule = [{"type": "sigstoreSigned", "keyPath": str(etc / "ci.pub")}]
        (etc / "policy.json").write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}], "transports": {
            "docker": {f"{host}/{repository}": rule for host in (registry.address, front.address)}}}))
        with httpx.Client(base_url=f"http://{registry.address}", timeout=60) as client:
            found = client.get(f"/v2/{repository}/manifests/latest", headers={"Accept": ACCEPT})
            found.raise_for_status()
        subject = {"mediaType": found.headers["Content-Type"], "digest": busybox.digest, "size": len(found.content)}
        signed = [key.sign(busybox.digest, f"{host}/{repository}:latest") for host in (registry.address, front.address)]
        other = push_referrer_signatures(registry.address, repository, subject, signed, "application/spdx+json")
        assert "no signature passed: the registry has none" in fails(workspace, uri)  # an SBOM's type: not looked at
        push_referrer_signatures(registry.address, repository, subject, signed, others=(other,))
        imported = workspace.run("import", "-o", "referred.sqsh", uri)
        assert imported.returncode == 0, imported.stderr
        assert f"signed by the key of {etc / 'ci.pub'} as {registry.address}/{repository}:latest" in imported.stderr
        verified = workspace.run("verify", "referred.sqsh")
        assert verified.returncode == 0 and "Signed: signed by the key of" in verified.stdout, verified.stderr
        assert front.referrer_requests == 0
        through_api = workspace.run("import", "-o", "api.sqsh", f"docker://{front.address}#{repository}:latest")
        assert through_api.returncode == 0 and front.referrer_requests == 1, through_api.stderr
        assert f"as {front.address}/{repository}:latest" in through_api.stderr


def test_a_tag_moved_after_signing_fails_the_import_and_the_image_verifies_still(
        busybox: PublishedImage, debian: PublishedImage, registry: Registry, image_workdir: Path,
        workspace: Workspace) -> None:
    """The tag names another, unsigned image now: importing it is refused, and the image imported
    before still verifies, by the signature of the manifest it records (not by what the tag names)."""
    uri = push_as(busybox, registry, "moved", image_workdir)
    repository = f"{registry.address}/hydria/moved"
    key = Key()
    push_signatures(registry.address, "hydria/moved", busybox.digest, [key.sign(busybox.digest, f"{repository}:latest")])
    (workspace.root / "ci.pub").write_bytes(key.public_pem)
    imported = workspace.run("import", "-o", "before.sqsh", uri)
    assert imported.returncode == 0, imported.stderr
    push_as(debian, registry, "moved", image_workdir)
    etc = workspace.root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "policy.json").write_text(json.dumps({"default": [
        {"type": "sigstoreSigned", "keyPath": str(workspace.root / "ci.pub")}]}))
    (workspace.out / "before.sqsh").rename(workspace.root / "before.sqsh")
    assert "no signature passed: the registry has none" in fails(workspace, uri)
    verified = workspace.run("verify", "--json", str(workspace.root / "before.sqsh"))
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["digest"] == busybox.digest != debian.digest
