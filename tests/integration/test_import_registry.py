"""Import from registries: multi-platform indexes, mixed compression, authentication, many
concurrent imports, a cache shared by several users, and hostile layers."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from testbed.authproxy import AuthProxy
from testbed.flakyproxy import FlakyProxy
from testbed.oci import Image, make_layer, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.stallproxy import StallProxy
from testbed.tarbuild import LayerTar
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def layer_file(path: Path, *entries: tuple[str, str]) -> Path:
    with LayerTar(path) as layer:
        for name, content in entries:
            layer.file(name, content)
    return path


@pytest.fixture(scope="session")
def variants(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> dict[str, str]:
    """Extra images pushed next to the test images; name -> docker:// URI."""
    work = image_workdir / "variants"
    work.mkdir()
    base = busybox.image.layers[0]
    uris = {}

    def publish(name: str, images: list[Image]) -> None:
        push(images, registry.address, f"hydria/{name}", "latest", work)
        uris[name] = f"docker://{registry.address}#hydria/{name}:latest"

    config = busybox.image.config
    publish("multi", [Image([base], config, "arm64", "v8"), Image([base], config, "amd64"),
                      Image([base], config, "ppc64le")])
    docker_layer = make_layer(base.tar_path, work, "gzip", "docker")
    publish("dockerlist", [Image([docker_layer], config, "amd64", manifest_format="docker"),
                           Image([docker_layer], config, "arm64", manifest_format="docker")])
    publish("dockerv2", [Image([docker_layer], config, "amd64", manifest_format="docker")])
    zstd = make_layer(layer_file(work / "z.tar", ("opt/zstd.txt", "zstd layer\n")), work, "zstd")
    plain = make_layer(layer_file(work / "p.tar", ("opt/plain.txt", "plain layer\n")), work, "none")
    publish("mixed", [Image([base, zstd, plain], config)])
    evil_tar = work / "evil.tar"
    with tarfile.open(evil_tar, "w") as tar:
        info = tarfile.TarInfo("../../escape")
        tar.addfile(info)
    publish("evil", [Image([base, make_layer(evil_tar, work)], config)])
    junk = work / "junk.tar"
    junk.write_bytes(b"this is not a tar archive\n" * 100)
    publish("notatar", [Image([base, make_layer(junk, work)], config)])
    truncated = work / "truncated.tar"  # a gzip stream cut short, in a blob that says "tar"
    truncated.write_bytes(gzip.compress(base.tar_path.read_bytes())[:4096])
    publish("truncatedgzip", [Image([base, make_layer(truncated, work, "none")], config)])
    return uris


def unsquashed_file(image: Path, path: str) -> str:
    return subprocess.run(["unsquashfs", "-cat", str(image), path], capture_output=True, text=True, check=True).stdout


def assert_same_image(image: Path, expected: Path) -> None:
    """The same files, with the same types, modes, owners and sizes."""
    def listing(path: Path) -> str:
        return subprocess.run(["unsquashfs", "-lln", str(path)], capture_output=True, text=True, check=True).stdout

    assert listing(image).splitlines()[1:] == listing(expected).splitlines()[1:]


def unsquashed_names(image: Path) -> str:
    return subprocess.run(["unsquashfs", "-l", str(image)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(("arch", "expected"), [("amd64", "amd64"), ("x86_64", "amd64"), ("arm64", "arm64"),
                                                ("arm64/v8", "arm64"), ("aarch64", "arm64"), ("ppc64le", "ppc64le")])
def test_index_platform_choice(arch: str, expected: str, variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "--arch", arch, "-o", "x.sqsh", variants["multi"])
    assert result.returncode == 0, result.stderr
    assert "doesn't match" not in result.stderr


def test_missing_platform_lists_what_exists(variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "-a", "s390x", variants["multi"])
    assert result.returncode == 1
    assert "has no image for linux/s390x (available: linux/arm64/v8, linux/amd64, linux/ppc64le)" in result.stderr
    assert list(workspace.out.iterdir()) == []


def test_unknown_architecture(variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "-a", "vax", variants["multi"])
    assert result.returncode == 1 and "Unsupported architecture: vax" in result.stderr


@pytest.mark.parametrize("name", ["dockerlist", "dockerv2", "mixed"])
def test_docker_schema2_lists_and_mixed_compression(name: str, variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "-o", "x.sqsh", variants[name])
    assert result.returncode == 0, result.stderr
    listing = unsquashed_names(workspace.out / "x.sqsh")
    assert "squashfs-root/bin/busybox" in listing
    if name == "mixed":
        assert "squashfs-root/opt/zstd.txt" in listing and "squashfs-root/opt/plain.txt" in listing


def test_single_arch_mismatch_is_refused_when_asked_for(variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", "-a", "arm64", "-o", "x.sqsh", variants["dockerv2"])
    assert result.returncode == 1 and not (workspace.out / "x.sqsh").exists()
    assert "the image is for amd64 only, not arm64" in result.stderr
    assert "hint: it has no arm64 variant: import it without --arch (or --arch amd64)" in result.stderr
    assert workspace.run("import", "-a", "amd64", "-o", "x.sqsh", variants["dockerv2"]).returncode == 0


def test_a_kept_image_is_not_served_for_another_architecture(variants: dict[str, str], workspace: Workspace) -> None:
    """The image cache keys what --arch asked for: after the amd64-only image is kept, asking for
    arm64 is refused as a fresh import refuses it, and asking for amd64 still gets the image."""
    assert workspace.run("import", "-o", "first.sqsh", variants["dockerv2"]).returncode == 0
    refused = workspace.run("import", "-a", "arm64", "-o", "x.sqsh", variants["dockerv2"])
    assert refused.returncode == 1 and "the image is for amd64 only, not arm64" in refused.stderr
    assert not (workspace.out / "x.sqsh").exists()
    for _ in range(2):  # imported, then kept under its own key
        asked = workspace.run("import", "-a", "amd64", "-o", "x.sqsh", variants["dockerv2"])
        assert asked.returncode == 0, asked.stderr
        (workspace.out / "x.sqsh").unlink()
    assert "Found the image in cache" in asked.stderr


@pytest.mark.parametrize(("name", "reason"), [("notatar", "invalid header"),
                                              ("truncatedgzip", "ended before the end-of-stream marker")])
def test_unreadable_layer_fails_clearly_and_writes_nothing(name: str, reason: str, variants: dict[str, str],
                                                            workspace: Workspace) -> None:
    result = workspace.run("import", "-o", "x.sqsh", variants[name])
    assert result.returncode == 1
    assert "is not a readable tar archive" in result.stderr and reason in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert list(workspace.out.iterdir()) == []


def test_escaping_layer_is_refused_and_nothing_is_written(variants: dict[str, str], workspace: Workspace) -> None:
    result = workspace.run("import", variants["evil"])
    assert result.returncode == 1
    assert "'../../escape' would land outside the root filesystem" in result.stderr
    assert list(workspace.out.iterdir()) == []


# --- authentication --------------------------------------------------------------------------

def test_bearer_token_with_credentials_is_reused_for_every_blob(debian: PublishedImage, registry: Registry,
                                                                workspace: Workspace) -> None:
    with AuthProxy(registry.address) as proxy:
        workspace.write_credentials("machine 127.0.0.1 login ada password $HYDRIA_TEST_SECRET\n")
        uri = f"docker://{proxy.address}#{debian.repository}:{debian.tag}"
        result = workspace.run("import", "-o", "x.sqsh", uri, HYDRIA_TEST_SECRET="s3cret")
        assert result.returncode == 0, result.stderr
        assert proxy.token_requests == 1


def test_bearer_anonymous_token(busybox: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    with AuthProxy(registry.address, anonymous=True) as proxy:
        result = workspace.run("import", "-o", "x.sqsh", f"docker://{proxy.address}#{busybox.repository}")
        assert result.returncode == 0, result.stderr


def test_user_in_uri_selects_the_credentials_line(busybox: PublishedImage, registry: Registry,
                                                  workspace: Workspace) -> None:
    with AuthProxy(registry.address) as proxy:
        workspace.write_credentials("# comment\nmachine 127.0.0.1 login bob password wrong\n"
                                     "machine 127.0.0.1 login ada password s3cret\n")
        result = workspace.run("import", "-o", "x.sqsh", f"docker://ada@{proxy.address}#{busybox.repository}")
        assert result.returncode == 0, result.stderr


def test_basic_auth(busybox: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    with AuthProxy(registry.address, mode="basic") as proxy:
        workspace.write_credentials("machine 127.0.0.1 login ada password s3cret\n")
        result = workspace.run("import", "-o", "x.sqsh", f"docker://{proxy.address}#{busybox.repository}")
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("form", ["multi-line", "with-port"])
def test_netrc_entries_over_lines_and_with_a_port(form: str, busybox: PublishedImage, registry: Registry,
                                                  workspace: Workspace) -> None:
    with AuthProxy(registry.address) as proxy:
        machine = "127.0.0.1" if form == "multi-line" else proxy.address
        workspace.write_credentials(f"machine {machine}\n  login ada\n  password s3cret\n" if form == "multi-line"
                          else f"machine 127.0.0.1 login bob password wrong\nmachine {machine} login ada password s3cret\n")
        result = workspace.run("import", "-o", "x.sqsh", f"docker://{proxy.address}#{busybox.repository}")
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("credentials", "message", "state"), [
    (None, "authentication anonymously at http://127.0.0.1:", "/.credentials does not exist"),
    ("machine other.example.com login ada password x\n", "authentication anonymously at",
     "has no entry for 127.0.0.1:PORT (its machines: other.example.com)"),
    ("machine 127.0.0.1 login ada password nope\n", "authentication as ada at", "has an entry for 127.0.0.1 (login ada)"),
])
def test_refused_credentials_fail_clearly(credentials: str | None, message: str, state: str, busybox: PublishedImage,
                                          registry: Registry, workspace: Workspace) -> None:
    """The error says which credentials file was read and what it has for the registry."""
    with AuthProxy(registry.address) as proxy:
        if credentials is not None:
            workspace.write_credentials(credentials)
        result = workspace.run("import", f"docker://{proxy.address}#{busybox.repository}")
        assert result.returncode == 1
        assert message in result.stderr and "failed: 401" in result.stderr
        assert state.replace("PORT", str(proxy.port)) in result.stderr
        assert list(workspace.out.iterdir()) == []


def test_user_without_password_and_no_terminal(busybox: PublishedImage, registry: Registry,
                                               workspace: Workspace) -> None:
    with AuthProxy(registry.address) as proxy:
        result = workspace.run("import", f"docker://carol@{proxy.address}#{busybox.repository}")
        assert result.returncode == 1
        assert "no password for carol at 127.0.0.1" in result.stderr


# --- concurrency and sharing -----------------------------------------------------------------

def test_eight_concurrent_imports_download_each_blob_once(debian: PublishedImage, registry: Registry,
                                                         workspace: Workspace, image_workdir: Path) -> None:
    push([debian.image], registry.address, "hydria/concurrent", "latest", image_workdir)
    uri = f"docker://{registry.address}#hydria/concurrent:latest"
    processes = [workspace.popen("import", "-o", f"c{i}.sqsh", uri) for i in range(8)]
    results = [(p.wait(timeout=600), p.communicate()[1]) for p in processes]
    assert all(code == 0 for code, _ in results), results
    fetches = registry.blob_fetches("hydria/concurrent")
    assert fetches and set(fetches.values()) == {1}, fetches
    sizes = {(workspace.out / f"c{i}.sqsh").read_bytes() for i in range(8)}
    assert len(sizes) == 1


def test_shared_cache_serves_several_users_safely(busybox: PublishedImage, registry: Registry,
                                                  workspace: Workspace, other_workspace: Workspace,
                                                  shared_cache: Path) -> None:
    push([busybox.image], registry.address, "hydria/shared", "latest", workspace.root)
    uri = f"docker://{registry.address}#hydria/shared:latest"
    first = workspace.run("import", "-o", "a.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert first.returncode == 0, first.stderr
    second = other_workspace.run("import", "-o", "b.sqsh", uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert second.returncode == 0, second.stderr
    assert set(registry.blob_fetches("hydria/shared").values()) == {1}
    blobs = shared_cache / "blobs" / "sha256"
    assert blobs.stat().st_mode & 0o7777 == 0o1777
    blob = next(p for p in blobs.iterdir() if p.stat().st_size > 100_000)
    assert blob.stat().st_uid == workspace.user.uid and blob.stat().st_mode & 0o777 == 0o644
    other = other_workspace.user
    assert run_as(other, ["rm", "-f", str(blob)]).returncode != 0
    assert run_as(other, ["sh", "-c", f"echo x >> {blob}"]).returncode != 0
    assert blob.exists()


def test_blob_planted_by_another_user_is_detected(busybox: PublishedImage, registry: Registry,
                                                  workspace: Workspace, other_workspace: Workspace,
                                                  shared_cache: Path) -> None:
    push([busybox.image], registry.address, "hydria/planted", "latest", workspace.root)
    layer = busybox.image.layers[0].blob.digest.split(":")[1]
    setup = other_workspace.run("import", "-o", "seed.sqsh", f"docker://{registry.address}#hydria/planted:latest",
                                HYDRIA_CACHE_PATH=str(shared_cache))
    assert setup.returncode == 0
    planted = shared_cache / "blobs" / "sha256" / layer
    # The other user replaces their own blob with different content of the same size.
    replace = (f"cp {planted} /tmp/p.$$ && rm {planted} && "
               f"head -c $(stat -c %s /tmp/p.$$) /dev/zero > {planted}; rm -f /tmp/p.$$")
    assert run_as(other_workspace.user, ["sh", "-c", replace]).returncode == 0
    result = workspace.run("import", "-o", "victim.sqsh", f"docker://{registry.address}#hydria/planted:latest",
                           HYDRIA_CACHE_PATH=str(shared_cache))
    assert result.returncode == 0, result.stderr  # not blocked: the blob goes to the private cache
    assert result.stderr.count(f"Not using {planted} (owned by {other_workspace.user.name})") == 1
    assert (workspace.root / "xdg-cache" / "hydria" / "blobs" / "sha256" / layer).stat().st_uid == workspace.user.uid
    assert_same_image(workspace.out / "victim.sqsh", other_workspace.out / "seed.sqsh")


def test_digest_names_the_platforms_manifest(busybox: PublishedImage, variants: dict[str, str],
                                            workspace: Workspace) -> None:
    plain = workspace.run("digest", busybox.docker_uri)
    assert plain.returncode == 0 and plain.stdout == f"{busybox.digest}\n", plain.stderr
    amd64, arm64 = (workspace.run("digest", "-a", arch, variants["multi"]).stdout.strip() for arch in ("amd64", "arm64"))
    assert amd64.startswith("sha256:") and arm64.startswith("sha256:") and amd64 != arm64
    pinned = workspace.run("import", "-a", "arm64", "-o", "pinned.sqsh",
                           variants["multi"].replace(":latest", f"@{arm64}"))  # the digest names that manifest
    assert pinned.returncode == 0, pinned.stderr
    wrong = workspace.run("digest", "oci://somewhere")
    assert wrong.returncode == 1 and "Invalid argument: oci://somewhere" in wrong.stderr
    missing = workspace.run("digest", "-a", "s390x", variants["multi"])
    assert missing.returncode == 1 and "s390x" in missing.stderr


def test_blob_corrupted_by_the_registry_is_rejected_while_streaming(busybox: PublishedImage, registry: Registry,
                                                                    workspace: Workspace, image_workdir: Path) -> None:
    """The merge reads the top layer while it downloads; wrong bytes must still fail the import,
    name the registry, image and digest, and leave neither an image nor a cache entry."""
    work = image_workdir / "corrupt"
    work.mkdir()
    payload = os.urandom(6 << 20)
    top = make_layer(layer_file(work / "top.tar", ("opt/big.bin", payload.hex())), work, "gzip")
    push([Image([busybox.image.layers[0], top], busybox.image.config)], registry.address, "hydria/corrupt", "latest", work)
    hex_digest = top.blob.digest.split(":")[1]
    stored = registry.directory / "storage/docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF  # still a valid gzip header; the content is wrong
    stored.write_bytes(bytes(data))
    result = workspace.run("import", "-o", "corrupt.sqsh", f"docker://{registry.address}#hydria/corrupt:latest")
    assert result.returncode == 1
    assert f"{registry.address}/hydria/corrupt: Checksum mismatch: sha256:{hex_digest}" in result.stderr
    assert not (workspace.out / "corrupt.sqsh").exists()
    assert not (workspace.cache / "blobs" / "sha256" / hex_digest).exists()


def test_blob_renamed_by_the_owner_of_the_shared_folders_is_detected(
        busybox: PublishedImage, registry: Registry, workspace: Workspace, other_workspace: Workspace,
        shared_cache: Path, image_workdir: Path) -> None:
    """In a sticky folder its owner may still rename other users' files: whoever made the cache's
    blob folders could give a user's own blob another digest's name. Such blobs are verified."""
    work = image_workdir / "renamed"
    work.mkdir()
    base, config = busybox.image.layers[0], busybox.image.config
    layers = {}
    for name in ("first", "second"):
        layers[name] = make_layer(layer_file(work / f"{name}.tar", (f"opt/{name}.txt", f"{name}\n")), work)
        push([Image([base, layers[name]], config)], registry.address, f"hydria/renamed-{name}", "latest", work)
    uri = {name: f"docker://{registry.address}#hydria/renamed-{name}:latest" for name in layers}
    seed = other_workspace.run("import", "-o", "seed.sqsh", busybox.docker_uri, HYDRIA_CACHE_PATH=str(shared_cache))
    assert seed.returncode == 0, seed.stderr  # the other user made the blob folders
    assert workspace.run("import", "-o", "first.sqsh", uri["first"], HYDRIA_CACHE_PATH=str(shared_cache)).returncode == 0
    blobs = shared_cache / "blobs" / "sha256"
    first_hex, second_hex = (layers[name].blob.digest.split(":")[1] for name in ("first", "second"))
    assert (blobs / first_hex).stat().st_uid == workspace.user.uid
    renamed = run_as(other_workspace.user, ["mv", str(blobs / first_hex), str(blobs / second_hex)])
    assert renamed.returncode == 0, renamed.stderr
    result = workspace.run("import", "-o", "second.sqsh", uri["second"], HYDRIA_CACHE_PATH=str(shared_cache))
    assert result.returncode == 0, result.stderr
    assert f"Not using {blobs / second_hex} (owned by {workspace.user.name})" in result.stderr
    assert unsquashed_file(workspace.out / "second.sqsh", "opt/second.txt") == "second\n"


@pytest.fixture(scope="module")
def big_top_layer(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> tuple[str, str, str]:
    """An image whose top layer (3 MiB of random bytes as hex: about 3.5 MiB gzipped) takes a
    few reads to download: its repository, the file's content and the layer's digest."""
    work = image_workdir / "bigtop"
    work.mkdir()
    payload = os.urandom(3 << 20).hex()
    top = make_layer(layer_file(work / "top.tar", ("opt/big.hex", payload)), work, "gzip")
    push([Image([busybox.image.layers[0], top], busybox.image.config)], registry.address, "hydria/bigtop", "latest", work)
    return "hydria/bigtop", payload, top.blob.digest


def test_a_broken_blob_download_resumes_where_it_stopped(big_top_layer: tuple[str, str, str], registry: Registry,
                                                          workspace: Workspace) -> None:
    repository, payload, _ = big_top_layer
    with FlakyProxy(registry.address, after=1 << 20, breaks=2) as proxy:
        result = workspace.run("import", "-o", "resumed.sqsh", f"docker://{proxy.address}#{repository}")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("broke off") == 2
    assert proxy.ranges_asked == [f"bytes={1 << 20}-", f"bytes={2 << 20}-"]  # from where each stopped
    assert unsquashed_file(workspace.out / "resumed.sqsh", "opt/big.hex") == payload


def test_a_broken_blob_download_starts_over_where_the_registry_ignores_ranges(
        big_top_layer: tuple[str, str, str], registry: Registry, workspace: Workspace) -> None:
    repository, payload, _ = big_top_layer
    with FlakyProxy(registry.address, after=1 << 20, breaks=1, ranges=False) as proxy:
        result = workspace.run("import", "-o", "again.sqsh", f"docker://{proxy.address}#{repository}")
    assert result.returncode == 0, result.stderr
    assert proxy.ranges_asked == [f"bytes={1 << 20}-"]
    assert unsquashed_file(workspace.out / "again.sqsh", "opt/big.hex") == payload


def test_a_blob_download_that_keeps_breaking_fails_clearly(big_top_layer: tuple[str, str, str], registry: Registry,
                                                          workspace: Workspace) -> None:
    repository, _, digest = big_top_layer
    with FlakyProxy(registry.address, after=1 << 20, breaks=100) as proxy:
        result = workspace.run("import", "-o", "broken.sqsh", f"docker://{proxy.address}#{repository}")
    assert result.returncode == 1
    assert f"{proxy.address}/{repository}: Download of {digest} failed after {3 << 20} of " in result.stderr
    assert "3 tries" in result.stderr and "HYDRIA_TRANSFER_RETRIES" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (workspace.out / "broken.sqsh").exists()
    assert not (workspace.cache / "blobs" / "sha256" / digest.split(":")[1]).exists()


def test_a_distant_registry_gets_several_downloads_at_once(variants: dict[str, str], registry: Registry,
                                                           workspace: Workspace) -> None:
    """Layers download one at a time while the merge keeps up, and more at once when it waits
    for the network: here each blob's first byte takes 0.3 s (the 3-layer "mixed" image)."""
    repository = variants["mixed"].split("#")[1]
    with FlakyProxy(registry.address, delay=0.3) as proxy:
        result = workspace.run("import", "-o", "far.sqsh", f"docker://{proxy.address}#{repository}")
    assert result.returncode == 0, result.stderr
    assert proxy.most_at_once >= 2


def test_a_redirect_to_a_closed_port_names_its_target(busybox: PublishedImage, registry: Registry,
                                                     workspace: Workspace) -> None:
    with StallProxy(registry.address, "blob-redirect-closed") as front:
        result = workspace.run("import", "-o", "x.sqsh", busybox.docker_uri.replace(registry.address, front.address))
    assert result.returncode == 1
    assert (f"Could not connect to 127.0.0.1:{front.closed_port} (where registry {front.address} redirected)"
            in result.stderr), result.stderr
    assert "the registry's storage is down or unreachable from here" in result.stderr
    assert list(workspace.out.iterdir()) == []


@pytest.mark.parametrize(("how", "message"), [
    ("blob-headers", "no data for 5 s"),
    ("manifest-silent", "no data for 5 s"),
    ("manifest-drip", "did not arrive within 5 s"),
    ("redirect-loop", "too many redirects"),
])
def test_a_stalled_registry_ends_the_import_clearly(how: str, message: str, busybox: PublishedImage,
                                                    registry: Registry, workspace: Workspace) -> None:
    with StallProxy(registry.address, how) as front:
        started = time.monotonic()
        result = workspace.run("import", "-o", "stalled.sqsh", busybox.docker_uri.replace(registry.address, front.address),
                               HYDRIA_TRANSFER_TIMEOUT="5", timeout=120)
        took = time.monotonic() - started
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and took < 60
    assert not (workspace.out / "stalled.sqsh").exists()


@pytest.mark.parametrize(("how", "signum"), [("blob-trickle", signal.SIGINT), ("blob-headers", signal.SIGINT),
                                             ("blob-trickle", signal.SIGTERM)])
def test_ctrl_c_ends_an_import_at_once_and_leaves_nothing(how: str, signum: int, busybox: PublishedImage,
                                                         registry: Registry, workspace: Workspace) -> None:
    """SIGINT (Ctrl-C) or SIGTERM (scancel, kill) while a layer downloads (slowly, or waiting on a
    stalled connection): hydria exits within a second (it waited for the layer in progress), with
    no image and no partial blob."""
    with StallProxy(registry.address, how) as front:
        importing = workspace.popen("import", "-o", "cut.sqsh", busybox.docker_uri.replace(registry.address, front.address))
        blobs = workspace.cache / "blobs" / "sha256"
        deadline = time.monotonic() + 30
        while not front.blob_requests and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)  # the layer is on its way
        interrupted = time.monotonic()
        importing.send_signal(signum)
        _, stderr = importing.communicate(timeout=30)
        took = time.monotonic() - interrupted
    expected = 143 if signum == signal.SIGTERM else 130  # 128 + the signal, as shells report it
    # hydria's own part is within a second; the bound leaves the rest to a busy machine (the fault it
    # guards against took 15 s)
    assert importing.returncode == expected and took < 5, (took, stderr)
    assert "Traceback" not in stderr
    assert sorted(p.name for p in workspace.out.iterdir()) == []
    for blob in blobs.iterdir() if blobs.exists() else []:  # whole blobs only (the config)
        assert "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() == "sha256:" + blob.name


@pytest.mark.parametrize("realm", ["::::", "http://127..0.1/token", "ftp://127.0.0.1/token", "http://[::1/token"])
def test_a_bearer_realm_that_is_no_url_is_a_clear_error(realm: str, busybox: PublishedImage, registry: Registry,
                                                       workspace: Workspace) -> None:
    with AuthProxy(registry.address, anonymous=True, realm=realm) as proxy:
        result = workspace.run("import", "-o", "x.sqsh", busybox.docker_uri.replace(registry.address, proxy.address))
    assert result.returncode == 1 and f"Could not get a token from {realm}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (workspace.out / "x.sqsh").exists()


def test_progress_off_a_terminal_says_the_layers_in_the_order_they_come(busybox: PublishedImage,
                                                                        workspace: Workspace) -> None:
    """Off a terminal (a batch log): how many layers are missing, then a line per layer done while
    the squash runs; the image's config is no layer and has no line (it came first, as a layer)."""
    result = workspace.run("import", "-o", "ordered.sqsh", busybox.docker_uri)
    assert result.returncode == 0, result.stderr
    lines = [line.removeprefix("[INFO] ") for line in result.stderr.splitlines()]
    layer = busybox.image.layers[0].blob.digest[7:19]
    assert lines[0] == "Downloading 1 missing layers...", lines
    blobs = [line for line in lines if re.match(r"^[0-9a-f]{12}  ", line)]
    assert len(blobs) == 1 and blobs[0].startswith(layer), lines
    assert lines[-1].startswith("Image written to")
