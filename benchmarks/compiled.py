"""Benchmarks time hydria as installed, with its modules' byte code written: the users who run
it here cannot write into a source checkout's ``__pycache__``, so without this every run would
compile the modules that changed since the last root run."""

from __future__ import annotations

import compileall
from pathlib import Path

import hydria


def compile_hydria() -> None:
    compileall.compile_dir(str(Path(hydria.__file__).parent), quiet=1)
