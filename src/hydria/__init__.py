"""hydria: unprivileged containers from Docker/OCI images for HPC and AI clusters.

The Python API is :mod:`hydria.api`; its main functions are also here (``hydria.import_image``,
``hydria.start``, ...), imported on first use so that the command line does not pay for them.
"""

from __future__ import annotations

from hydria.version import __version__

__all__ = ["__version__"]

_API = frozenset({"import_image", "create", "start", "containers", "remove", "export"})


def __getattr__(name: str) -> object:
    if name in _API:
        from hydria import api

        return getattr(api, name)
    raise AttributeError(f"module 'hydria' has no attribute {name!r}")
