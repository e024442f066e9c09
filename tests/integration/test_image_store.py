"""The image store (docs/store.md): one account (the test user ``hydria-store``) imports an image
once; every user then gets it from the store after resolving the same manifest with their own
registry request, and cannot change it. Concurrent importers wait for the one that runs, and a
dead importer's lock is taken over without a half-written entry in sight."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hydria.runtime.rootfs import image_layers
from testbed.authproxy import AuthProxy
from testbed.publish import PublishedImage, push_as
from testbed.registry import Registry
from testbed.stallproxy import StallProxy
from testbed.tree import image_listing
from testbed.users import run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def doctor_store_check(user: Workspace, store: Path) -> dict[str, str]:
    report = json.loads(user.run("doctor", "--json", HYDRIA_STORE_PATH=str(store)).stdout)
    return next(c for c in report["checks"] if c["name"] == "image store")


def store_run(owner: Workspace, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return owner.run("store", *args, HYDRIA_STORE_PATH=str(store))


@pytest.fixture(params=["layered", "one image file"])
def layout(request: pytest.FixtureRequest, store_workspace: Workspace) -> str:
    """How the store's owner keeps images (HYDRIA_LAYERED_IMAGES in the owner's settings):
    layered, the default, or one image file each."""
    return _owner_keeps(store_workspace, request.param)


@pytest.fixture
def one_file_layout(store_workspace: Workspace) -> str:
    return _owner_keeps(store_workspace, "one image file")


def _owner_keeps(owner: Workspace, layout: str) -> str:
    conf = owner.root / "config" / "hydria.conf"
    conf.write_text(f"HYDRIA_LAYERED_IMAGES {'y' if layout == 'layered' else 'n'}\n")
    os.chown(conf, owner.user.uid, owner.user.gid)
    return layout


def from_the_store(result: subprocess.CompletedProcess[str], entry: Path) -> bool:
    """Whether a user's ``import -o`` made its file of the store's ``entry``: a link or copy of
    an image file, or a layered entry merged (no download either way)."""
    if entry.name.endswith(".layers"):
        return f"Merging the {len(image_layers(str(entry)))} layer images of {entry}" in result.stderr
    return f"Found the image in the image store: {entry}" in result.stderr


def test_one_import_serves_every_user(busybox: PublishedImage, registry: Registry, store: Path, layout: str,
                                      store_workspace: Workspace, workspace: Workspace,
                                      other_workspace: Workspace) -> None:
    uri = push_as(busybox, registry, "stored", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    imported = store_run(store_workspace, store, "import", uri)
    assert imported.returncode == 0, imported.stderr
    entry = Path(imported.stdout.strip())
    assert entry.parent == store / "images" and entry.stat().st_mode & 0o777 == 0o644
    served = registry.blob_fetches("hydria/stored")
    for user in (workspace, other_workspace):
        result = user.run("import", "-o", "mine.sqsh", uri, HYDRIA_STORE_PATH=str(store))
        assert result.returncode == 0, result.stderr
        assert from_the_store(result, entry), result.stderr
        if layout == "layered":
            assert "squashfs-root/bin/busybox" in image_listing(image_layers(str(user.out / "mine.sqsh")))
        else:
            assert (user.out / "mine.sqsh").read_bytes() == entry.read_bytes()
    assert registry.blob_fetches("hydria/stored") == served  # no blob again: only the manifest requests
    for attack in (f"echo x >> {entry}", f"touch {store}/images/new.sqsh", f"rm -f {entry}"):
        assert run_as(workspace.user, ["sh", "-c", attack]).returncode != 0, attack
    assert run_as(workspace.user, ["ls", str(store / "images")]).returncode != 0  # names are not listed
    listing = json.loads(store_run(store_workspace, store, "list", "--json").stdout)
    weight = sum(os.stat(path).st_size for path in {str(entry), *image_layers(str(entry))})  # with its layer images
    assert [(e["path"], e["size"]) for e in listing] == [(str(entry), weight)]
    assert listing[0]["uri"].endswith("hydria/stored:latest")
    refused = workspace.run("store", "list", HYDRIA_STORE_PATH=str(store))
    assert refused.returncode == 1 and "only hydria-store and root list the image store" in refused.stderr
    check = doctor_store_check(workspace, store)
    assert check["status"] == "ok" and check["detail"] == f"{store}, written by hydria-store only", check
    owners = doctor_store_check(store_workspace, store)
    assert owners["detail"].startswith(f"{store}, written by hydria-store only: 1 image(s)"), owners
    assert workspace.run("store", "import", uri, HYDRIA_STORE_PATH=str(store)).stderr.startswith(
        f"[ERROR] only {store_workspace.user.name} writes the image store {store}")


def test_a_moved_tag_is_not_served_the_stored_image(busybox: PublishedImage, debian: PublishedImage,
                                                    registry: Registry, store: Path, store_workspace: Workspace,
                                                    workspace: Workspace) -> None:
    """The user's own manifest request decides: a tag that now names another image misses."""
    uri = push_as(busybox, registry, "moving", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    assert store_run(store_workspace, store, "import", uri).returncode == 0
    push_as(debian, registry, "moving", store_workspace.root)
    result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_STORE_PATH=str(store))
    assert result.returncode == 0, result.stderr
    assert "image store" not in result.stderr
    listing = subprocess.run(["unsquashfs", "-l", str(workspace.out / "mine.sqsh")], capture_output=True, text=True,
                             check=True).stdout
    assert "squashfs-root/usr/bin/apt" in listing  # debian's, not the stored busybox


@pytest.mark.parametrize("exposure", ["store writable by others", "images owned by a user"])
def test_a_store_others_could_change_is_not_used(exposure: str, busybox: PublishedImage, registry: Registry,
                                                 store: Path, store_workspace: Workspace,
                                                 workspace: Workspace, other_workspace: Workspace) -> None:
    uri = push_as(busybox, registry, "exposed", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    assert store_run(store_workspace, store, "import", uri).returncode == 0
    if exposure == "store writable by others":
        store.chmod(0o777)
    else:
        subprocess.run(["chown", "-R", f"{other_workspace.user.uid}", str(store / "images")], check=True)
    result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_STORE_PATH=str(store))
    assert result.returncode == 0, result.stderr
    assert "[WARN] Not using the image store: " in result.stderr and "can be changed by others" in result.stderr
    assert "Found the image in the image store" not in result.stderr
    assert doctor_store_check(workspace, store)["status"] == "fail"


@pytest.mark.parametrize("mode", ["bearer", "basic"])
def test_a_private_image_never_enters_the_store(mode: str, busybox: PublishedImage, registry: Registry, store: Path,
                                                store_workspace: Workspace, workspace: Workspace,
                                                other_workspace: Workspace) -> None:
    """The registry keeps deciding who reads an image: the store's owner holds credentials that
    pull it, yet the store asks the registry without them and keeps nothing, so no path, digest
    or log line can lead a user without access to its bytes; a user with access imports it alone."""
    push_as(busybox, registry, "private", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    with AuthProxy(registry.address, mode=mode) as proxy:  # type: ignore[arg-type]
        uri = f"docker://{proxy.address}#hydria/private:latest"
        for user in (store_workspace, workspace):
            user.write_credentials("machine 127.0.0.1 login ada password s3cret\n")
        refused = store_run(store_workspace, store, "import", uri)
        assert refused.returncode == 1, refused.stderr
        assert f"{uri} cannot be pulled without credentials" in refused.stderr
        assert "the image store keeps only images that anyone may pull" in refused.stderr
        assert "each user imports it with their own credentials" in refused.stderr
        assert refused.stdout == "" and sorted(p.name for p in (store / "images").iterdir()) == []
        mine = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_STORE_PATH=str(store))
        assert mine.returncode == 0 and "image store" not in mine.stderr, mine.stderr
        assert store_workspace.run("import", "-o", "owners.sqsh", uri, HYDRIA_STORE_PATH=str(store)).returncode == 0
        assert sorted(p.name for p in (store / "images").iterdir()) == []  # the owner's own import stays its own
        denied = other_workspace.run("import", "-o", "stolen.sqsh", uri, HYDRIA_STORE_PATH=str(store))
        assert denied.returncode == 1 and ".credentials does not exist" in denied.stderr, denied.stderr
    assert not (other_workspace.out / "stolen.sqsh").exists()


def test_a_public_image_behind_anonymous_tokens_is_stored(busybox: PublishedImage, registry: Registry, store: Path,
                                                          layout: str, store_workspace: Workspace,
                                                          workspace: Workspace) -> None:
    """A registry that hands anonymous tokens (Docker Hub, nvcr.io) serves public images to anyone:
    those the store keeps, whatever credentials its owner has."""
    push_as(busybox, registry, "public", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    with AuthProxy(registry.address, anonymous=True) as proxy:
        uri = f"docker://{proxy.address}#hydria/public:latest"
        store_workspace.write_credentials("machine 127.0.0.1 login ada password s3cret\n")
        stored = store_run(store_workspace, store, "import", uri)
        assert stored.returncode == 0, stored.stderr
        result = workspace.run("import", "-o", "mine.sqsh", uri, HYDRIA_STORE_PATH=str(store))
    assert result.returncode == 0 and from_the_store(result, Path(stored.stdout.strip())), result.stderr


def test_entries_of_an_older_version_are_sealed(busybox: PublishedImage, debian: PublishedImage,
                                                registry: Registry, store: Path, one_file_layout: str,
                                                store_workspace: Workspace, workspace: Workspace) -> None:
    """An older hydria stored images (one file each) with its owner's credentials and marked none public: the
    owner's next import or init makes every such entry (and one without a record, left by an
    import that died long ago) unreadable to users, and says so."""
    uri = push_as(busybox, registry, "legacy", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    entry = Path(store_run(store_workspace, store, "import", uri).stdout.strip())
    record = store / "meta" / f"{entry.name.removesuffix('.sqsh')}.json"
    data = json.loads(record.read_text())
    del data["public"]
    record.write_text(json.dumps(data))
    orphan = store / "images" / f"{'0' * 64}.sqsh"
    orphan.write_bytes(entry.read_bytes())
    os.chown(orphan, store_workspace.user.uid, store_workspace.user.gid)
    orphan.chmod(0o644)
    age(orphan, 1)
    result = store_run(store_workspace, store, "import", push_as(debian, registry, "legacy-next", store_workspace.root))
    assert result.returncode == 0, result.stderr
    for sealed in (entry, orphan):
        assert f"Sealed {sealed}: imported with the owner's credentials by an older hydria" in result.stderr
        assert sealed.stat().st_mode & 0o777 == 0o600
        assert run_as(workspace.user, ["cat", str(sealed)]).returncode != 0
    assert Path(result.stdout.strip()).stat().st_mode & 0o777 == 0o644
    again = store_run(store_workspace, store, "init")
    assert again.returncode == 0 and "Sealed" not in again.stderr


def test_doctor_says_why_the_owner_could_not_import(store: Path, store_workspace: Workspace,
                                                   hydria_bin: str) -> None:
    """The Slurm plugin has the store's owner import a step's image: doctor, run by the owner or
    by root, finds what would stop it (here a cache folder the owner cannot create) and says so."""
    assert store_run(store_workspace, store, "init").returncode == 0
    unusable = "/root/hydria-no-cache"
    as_owner = json.loads(store_workspace.run(
        "doctor", "--json", HYDRIA_STORE_PATH=str(store), HYDRIA_CACHE_PATH=unusable).stdout)
    as_root = json.loads(subprocess.run(
        [hydria_bin, "doctor", "--json"], capture_output=True, text=True, check=False,
        env={**os.environ, "HYDRIA_STORE_PATH": str(store), "HYDRIA_CACHE_PATH": unusable}).stdout)
    for report in (as_owner, as_root):
        check = next(c for c in report["checks"] if c["name"] == "image store")
        assert check["status"] == "fail", check
        assert check["detail"].startswith(f"{store}: hydria-store cannot import into it: {unusable}"), check
        assert "HYDRIA_CACHE_PATH" in check["detail"] + check["fix"], check
    fine = store_run(store_workspace, store, "check")
    assert fine.returncode == 0 and fine.stdout.startswith(f"the store {store} and the blob cache "), fine.stderr


def test_importers_wait_for_the_one_that_runs(debian: PublishedImage, registry: Registry, store: Path,
                                             store_workspace: Workspace) -> None:
    uri = push_as(debian, registry, "once", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    importers = [store_workspace.popen("store", "import", uri, HYDRIA_STORE_PATH=str(store)) for _ in range(3)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in importers]
    assert all(code == 0 for code, _, _ in results), results
    assert len({out for _, out, _ in results}) == 1  # one entry
    assert set(registry.blob_fetches("hydria/once").values()) == {1}
    waited = [err for _, _, err in results if "Waiting for node " in err]
    assert waited and all(", which imports " in err for err in waited)


def test_a_dead_importers_lock_is_taken_over(busybox: PublishedImage, registry: Registry, store: Path, layout: str,
                                             store_workspace: Workspace) -> None:
    """An importer that died leaves its lock (never touched again) and, on NFS, a partial file:
    the next import takes over, removes both, and writes the whole entry."""
    uri = push_as(busybox, registry, "dead", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    entry = Path(store_run(store_workspace, store, "import", uri).stdout.strip())
    key = entry.name.rpartition(".")[0]
    for path in (entry, store / "meta" / f"{key}.json"):
        path.unlink()
    lock, partial = store / "locks" / f"{key}.lock", store / "images" / f".{entry.name}.deadnode.4242.ab.partial"
    for path, text in ((lock, "deadnode.4242\n"), (partial, "half an image")):
        path.write_text(text)
        os.utime(path, (time.time() - 600, time.time() - 600))
    result = store_run(store_workspace, store, "import", uri)
    assert result.returncode == 0, result.stderr
    assert "Taking over the import of" in result.stderr and "node deadnode, process 4242 has not touched" in result.stderr
    assert entry.is_file() and not partial.exists() and list((store / "locks").iterdir()) == []


def test_a_live_importers_lock_is_waited_for(busybox: PublishedImage, registry: Registry, store: Path, layout: str,
                                            store_workspace: Workspace) -> None:
    uri = push_as(busybox, registry, "live", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    entry = Path(store_run(store_workspace, store, "import", uri).stdout.strip())
    key = entry.name.rpartition(".")[0]
    entry.unlink()
    lock = store / "locks" / f"{key}.lock"
    lock.write_text("othernode.77\n")
    released = threading.Timer(3, lock.unlink)
    released.start()
    started = time.monotonic()
    result = store_run(store_workspace, store, "import", uri)
    released.join()
    assert result.returncode == 0, result.stderr
    assert "Waiting for node othernode, process 77, which imports" in result.stderr
    assert time.monotonic() - started >= 3 and entry.is_file()


def age(path: Path, days: float) -> None:
    """As if ``path`` was last read and written ``days`` ago."""
    when = time.time() - days * 86400
    os.utime(path, (when, when))


def test_prune_removes_the_least_recently_used_images_but_none_in_use(
        busybox: PublishedImage, debian: PublishedImage, registry: Registry, store: Path, layout: str,
        store_workspace: Workspace, workspace: Workspace) -> None:
    """The old and the mounted image are alike but for their name: layered, they share every layer
    image but the top one (the runtime files), and the old one goes with its own."""
    uris = {name: push_as(image, registry, f"pruned-{name}", store_workspace.root)
            for name, image in (("old", busybox), ("mounted", busybox), ("new", debian))}
    assert store_run(store_workspace, store, "init").returncode == 0
    entries = {name: Path(store_run(store_workspace, store, "import", uri).stdout.strip()) for name, uri in uris.items()}
    age(entries["old"], 3)
    age(entries["mounted"], 4)  # the least recently used, but a container runs from it
    running = subprocess.Popen(["runuser", "-u", workspace.user.name, "--", workspace.hydria, "start",
                                str(entries["mounted"]), "sleep", "60"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        served = image_layers(str(entries["mounted"]))[-1]  # the image file, or its top layer image
        while served not in subprocess.run(["pgrep", "-a", "squashfuse"], capture_output=True, text=True,
                                           check=False).stdout \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = workspace.run("store", "prune", "--to", "0", HYDRIA_STORE_PATH=str(store))
        assert refused.returncode == 1 and "only hydria-store writes the image store" in refused.stderr
        dry = store_run(store_workspace, store, "prune", "--to", "0", "--dry-run")
        assert dry.returncode == 0 and f"would remove {entries['old']}" in dry.stdout
        assert entries["old"].exists()
        pruned = store_run(store_workspace, store, "prune", "--to", "0")
        assert pruned.returncode == 0, pruned.stderr
    finally:
        running.kill()
        running.wait()
    assert f"removed {entries['old']}" in pruned.stdout and "removed 1 image(s)" in pruned.stdout
    assert not entries["old"].exists() and entries["mounted"].exists() and entries["new"].exists()  # new: used today
    listed = json.loads(store_run(store_workspace, store, "list", "--json").stdout)
    assert sorted(e["path"] for e in listed) == sorted(str(entries[n]) for n in ("mounted", "new"))


def test_an_import_prunes_the_store_past_its_high_watermark(busybox: PublishedImage, debian: PublishedImage,
                                                           registry: Registry, store: Path,
                                                           store_workspace: Workspace) -> None:
    old, new = (push_as(image, registry, f"watermark-{n}", store_workspace.root)
                for n, image in (("old", busybox), ("new", debian)))
    assert store_run(store_workspace, store, "init").returncode == 0
    first = Path(store_run(store_workspace, store, "import", old).stdout.strip())
    age(first, 3)
    result = store_workspace.run("store", "import", new, HYDRIA_STORE_PATH=str(store), HYDRIA_STORE_PRUNE_ABOVE="1M")
    assert result.returncode == 0, result.stderr
    assert "Pruned the image store to 819.2 KiB: 1 image(s) least recently used" in result.stderr
    assert not first.exists() and Path(result.stdout.strip()).exists()  # the new one is within the grace period
    bad = store_workspace.run("store", "prune", HYDRIA_STORE_PATH=str(store), HYDRIA_STORE_PRUNE_ABOVE="lots")
    assert bad.returncode == 1 and "'lots' is not a size" in bad.stderr


def test_a_killed_importer_leaves_no_entry_and_is_taken_over(busybox: PublishedImage, registry: Registry,
                                                             store: Path, layout: str,
                                                             store_workspace: Workspace) -> None:
    """SIGKILL while a layer downloads (the registry stalls it): nothing appears in the store; the
    lock stays, and the next import on this node takes it over at once (its holder's process is
    gone), not after the stale period that another node's importer gets. The killed importer is
    not collected until the end (a zombie, as under a PID 1 that never reaps): it holds nothing."""
    push_as(busybox, registry, "killed", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    with StallProxy(registry.address, "blob-headers") as front:
        uri = f"docker://{front.address}#hydria/killed:latest"
        importing = store_workspace.popen("store", "import", uri, HYDRIA_STORE_PATH=str(store))
        deadline = time.monotonic() + 30
        while not (front.blob_requests and list((store / "locks").iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)
        importing.kill()
        while Path(f"/proc/{importing.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            time.sleep(0.01)
        [lock] = list((store / "locks").iterdir())
        assert [path.name for path in (store / "images").iterdir() if not path.name.startswith(".")] == []
        front.how = "none"  # the registry answers again: every request is forwarded
        started = time.monotonic()
        result = store_run(store_workspace, store, "import", uri)
    importing.wait()
    assert result.returncode == 0, result.stderr
    assert f"Taking over the import of {lock.name[:12]}: node " in result.stderr
    assert f"process {importing.pid} is gone (killed)" in result.stderr
    assert "Waiting for" not in result.stderr and time.monotonic() - started < 60
    assert "squashfs-root/bin/busybox" in image_listing(image_layers(result.stdout.strip())) and list((store / "locks").iterdir()) == []


def test_a_stored_image_is_not_served_for_another_architecture(busybox: PublishedImage, registry: Registry,
                                                               store: Path, store_workspace: Workspace,
                                                               workspace: Workspace) -> None:
    """The store keys what --arch asked for: its entry of an image of one architecture is served
    neither to a user's import nor to a store import that asks for another."""
    uri = push_as(busybox, registry, "onearch", store_workspace.root)
    assert store_run(store_workspace, store, "init").returncode == 0
    assert store_run(store_workspace, store, "import", uri).returncode == 0
    own = busybox.image.architecture
    other = "arm64" if own == "amd64" else "amd64"
    for user, args in ((store_workspace, ("store", "import", "-a", other, uri)),
                       (workspace, ("import", "-a", other, "-o", "x.sqsh", uri))):
        refused = user.run(*args, HYDRIA_STORE_PATH=str(store))
        assert refused.returncode == 1 and f"the image is for {own} only, not {other}" in refused.stderr, args
        assert "Found the image in the image store" not in refused.stderr
