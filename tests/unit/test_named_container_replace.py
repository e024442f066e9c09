"""A named container replaced by forced creates (``create -f``) at once: the name always holds a
whole container, every create succeeds and the last one stays (docs/security.md)."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from hydria.config import load_settings
from hydria.container.named_containers import NamedContainers
from hydria.errors import AlreadyExists

CREATES, ROUNDS = 8, 25


def _containers(tmp_path: Path) -> NamedContainers:
    return NamedContainers(load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path / "none"),
                                          "HYDRIA_DATA_PATH": str(tmp_path / "data")}))


def _made(containers: NamedContainers, tag: str) -> Path:
    staging = containers.root / f".same.creating.{tag}"
    (staging / "upper").mkdir(parents=True)
    (staging / "maker").write_text(tag)
    return staging


def _replace_again_and_again(data: Path, tag: int) -> None:
    containers = _containers(data.parent)
    for round_ in range(ROUNDS):
        staging = _made(containers, f"{tag}.{round_}")
        containers._put(staging, containers.path("same"), replace=True)
        assert not staging.exists() or (staging / "maker").read_text() != f"{tag}.{round_}"


def test_concurrent_forced_creates_never_leave_the_name_empty(tmp_path: Path) -> None:
    containers = _containers(tmp_path)
    containers.root.mkdir()
    target = containers.path("same")
    containers._put(_made(containers, "first"), target, replace=False)
    missing: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not (target / "maker").exists():
                missing.append("empty")

    watcher = threading.Thread(target=watch)
    watcher.start()
    context = multiprocessing.get_context("fork")
    creates = [context.Process(target=_replace_again_and_again, args=(containers.root, n)) for n in range(CREATES)]
    for process in creates:
        process.start()
    for process in creates:
        process.join(120)
    done.set()
    watcher.join()
    assert [process.exitcode for process in creates] == [0] * CREATES
    assert missing == []
    assert (target / "maker").read_text().endswith(f".{ROUNDS - 1}")  # the last round of one of them


def test_a_create_without_force_keeps_the_container_there(tmp_path: Path) -> None:
    containers = _containers(tmp_path)
    containers.root.mkdir()
    target = containers.path("same")
    containers._put(_made(containers, "first"), target, replace=False)
    staging = _made(containers, "second")
    with pytest.raises(AlreadyExists):
        containers._put(staging, target, replace=False)
    assert (target / "maker").read_text() == "first" and (staging / "maker").read_text() == "second"
