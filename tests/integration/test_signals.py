"""Every long phase of a command that makes something ends at once on every signal that users and
schedulers send, with nothing half-made left: one row per phase (a new phase takes part by adding
its row), four ways of sending each signal.

The phase is surely under way when the signal comes, whatever the machine's speed: the program
that hydria runs in it is held stopped once it is there, or the registry it sends to stops
answering. hydria must then end within a bound that leaves a busy machine its time (its own part
is well under a second), with 128 + the signal, no image or other output, and no process of the
user's left (the held program included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from testbed.oci import Image, make_layer, push
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.stallproxy import StallProxy
from testbed.tarbuild import LayerTar
from testbed.users import live_processes, run_as
from testbed.workspace import Workspace
from tests.integration.test_build import base_of, make_context

pytestmark = pytest.mark.integration

BOUND = 5.0  # seconds from the signal to hydria's exit


@pytest.fixture(scope="module")
def slow_to_squash(busybox: PublishedImage, registry: Registry, image_workdir: Path) -> str:
    """An image with a 32 MiB layer of random bytes, which xz takes seconds to squash: its URI."""
    work = image_workdir / "slowsquash"
    work.mkdir()
    with LayerTar(work / "top.tar") as layer:
        layer.file("opt/random.bin", os.urandom(32 << 20))
    top = make_layer(work / "top.tar", work, "none")
    push([Image([busybox.image.layers[0], top], busybox.image.config)], registry.address, "hydria/slowsquash",
         "latest", work)
    return f"docker://{registry.address}#hydria/slowsquash"


@dataclass
class Scene:
    """What a phase's row sets up: hydria's arguments and settings, the program to hold stopped
    (or the registry front that stops answering), and what must not be left."""

    workspace: Workspace
    stack: ExitStack
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    held: str = ""  # the program hydria runs in the phase, held stopped once it is there
    front: StallProxy | None = None  # else: a registry front whose uploads are never answered
    left: Callable[[], list[str]] = list  # what the phase may have half-made: must be empty at the end


Setup = Callable[[Scene, "Fixtures"], None]


@dataclass
class Fixtures:
    images: dict[str, Path]
    busybox: PublishedImage
    debian: PublishedImage
    registry: Registry
    slow_to_squash: str


def _import(scene: Scene, fixtures: Fixtures) -> None:
    scene.args = ["import", "-o", "cut.sqsh", fixtures.slow_to_squash]
    scene.env = {"HYDRIA_SQUASH_OPTIONS": "-comp xz"}
    scene.held = "tar2sqfs"


def _store_import(scene: Scene, fixtures: Fixtures) -> None:
    store = scene.workspace.root / "store"
    store.mkdir()
    os.chown(store, scene.workspace.user.uid, scene.workspace.user.gid)
    scene.env = {"HYDRIA_STORE_PATH": str(store), "HYDRIA_SQUASH_OPTIONS": "-comp xz"}
    initialised = scene.workspace.run("store", "init", **scene.env)
    assert initialised.returncode == 0, initialised.stderr
    scene.args = ["store", "import", fixtures.slow_to_squash]
    scene.held = "tar2sqfs"
    scene.left = lambda: sorted(str(p.relative_to(store)) for p in (store / "images").rglob("*"))


def _export(scene: Scene, fixtures: Fixtures) -> None:
    created = scene.workspace.run("create", "-n", "c", str(fixtures.images["debian"]))
    assert created.returncode == 0, created.stderr
    scene.args = ["export", "-o", "out.sqsh", "c"]
    scene.held = "mksquashfs"


def _create_unpacking(scene: Scene, fixtures: Fixtures) -> None:
    data = scene.workspace.root / "data"
    scene.args = ["create", "--unpack", "-n", "u", str(fixtures.images["debian"])]
    scene.held = "unsquashfs"
    scene.left = lambda: sorted(p.name for p in data.iterdir()) if data.exists() else []


def _bundle(scene: Scene, fixtures: Fixtures) -> None:
    scene.args = ["bundle", "-o", "out.run", str(fixtures.images["debian"])]
    scene.held = "sqfs2tar"


def _build_step(scene: Scene, fixtures: Fixtures) -> None:
    context = make_context(scene.workspace, {"Dockerfile": f"FROM {base_of(fixtures.debian)}\nRUN sleep 60\n"})
    scene.args = ["build", "-o", "built.sqsh", str(context)]
    scene.held = "sleep"
    scene.left = lambda: [str(p) for p in (scene.workspace.cache / "build" / "work").glob("step.*")]


def _push(scene: Scene, fixtures: Fixtures) -> None:
    scene.front = scene.stack.enter_context(StallProxy(fixtures.registry.address, "upload-silent"))
    repository = f"cut/push-{os.getpid()}-{time.monotonic_ns()}"
    scene.args = ["push", f"oci://{fixtures.busybox.oci_layout}", f"docker://{scene.front.address}#{repository}:1"]

    def manifest() -> list[str]:
        answer = httpx.get(f"http://{fixtures.registry.address}/v2/{repository}/manifests/1")
        return [] if answer.status_code == 404 else [f"the manifest ({answer.status_code})"]
    scene.left = manifest


PHASES: dict[str, Setup] = {
    "import-squashing": _import,
    "store-import-squashing": _store_import,
    "export": _export,
    "create-unpacking": _create_unpacking,
    "bundle": _bundle,
    "build-step": _build_step,
    "push-uploading": _push,
}
WAYS = {  # (the signal, ignored as inherited, sent to the whole group)
    "kill-INT-of-a-background-job": (signal.SIGINT, True, False),  # bash ignores SIGINT in a script's job
    "ctrl-c": (signal.SIGINT, False, True),  # the terminal: hydria and what it runs get it
    "hang-up": (signal.SIGHUP, False, True),  # the terminal closed
    "kill": (signal.SIGTERM, False, False),  # kill, scancel, a time limit
}


def _descendants(root: int) -> dict[int, str]:
    """The processes below ``root``, with their command names."""
    parents: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            head, _, rest = stat.read_text().rpartition(")")
            parents[int(stat.parent.name)] = (int(rest.split()[1]), head.partition("(")[2])
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (parent, _) in parents.items() if parent in frontier and pid not in found}
        found.update({pid: parents[pid][1] for pid in frontier})
    return found


def _hold(root: int, name: str, wait: float = 60) -> int:
    """Stop the first process named ``name`` below ``root`` once there is one; its PID."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for pid, command in _descendants(root).items():
            if command == name:
                os.kill(pid, signal.SIGSTOP)
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no {name} under {root} within {wait} s")


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("phase", PHASES)
def test_a_signal_ends_every_phase_at_once_and_leaves_nothing(
        phase: str, way: str, images: dict[str, Path], busybox: PublishedImage, debian: PublishedImage,
        registry: Registry, slow_to_squash: str, workspace: Workspace) -> None:
    signum, inherited_ignore, to_group = WAYS[way]
    fixtures = Fixtures(images, busybox, debian, registry, slow_to_squash)
    with ExitStack() as stack:
        scene = Scene(workspace, stack)
        PHASES[phase](scene, fixtures)
        before = sorted(p.name for p in workspace.out.iterdir())
        ignore = "trap '' INT; " if inherited_ignore else ""  # as bash starts a script's background job
        running = subprocess.Popen(["sh", "-c", f'{ignore}exec "$0" "$@"', workspace.hydria, *scene.args],
                                   user=workspace.user.uid, group=workspace.user.gid, extra_groups=[],
                                   env=workspace.user.environment(workspace.env(**scene.env)), cwd=workspace.out,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)  # a group of its own, as a terminal's job
        held = None
        if scene.front is not None:
            deadline = time.monotonic() + 60
            while not scene.front.uploads and running.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert scene.front.uploads, "the push sent nothing: nothing was tested"
        else:
            held = _hold(running.pid, scene.held)
        signalled = time.monotonic()
        os.killpg(running.pid, signum) if to_group else running.send_signal(signum)
        if held is not None:
            with contextlib.suppress(ProcessLookupError):  # hydria may have killed and reaped it already
                os.kill(held, signal.SIGCONT)
        _, stderr = running.communicate(timeout=60)
        took = time.monotonic() - signalled
        assert running.returncode == 128 + signum and took < BOUND, (took, stderr)
        assert "Traceback" not in stderr
        assert held is None or _ended(held)
        assert sorted(p.name for p in workspace.out.iterdir()) == before
        assert live_processes(workspace.user, wait=BOUND) == []
        assert scene.left() == []
    if phase == "store-import-squashing":  # the store takes the next import as if none had begun
        again = run_as(workspace.user, [workspace.hydria, "store", "import", slow_to_squash],
                       env=workspace.env(**scene.env), cwd=workspace.out, timeout=300)
        assert again.returncode == 0, again.stderr
