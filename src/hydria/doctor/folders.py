"""The folders hydria writes (HYDRIA_DATA_PATH, _RUNTIME_PATH, _TEMP_PATH) and the configuration folders."""

from __future__ import annotations

import os
from pathlib import Path

from hydria.config import Settings
from hydria.doctor.report import Check


def check_setting_path(settings: Settings, setting: str) -> Check:
    path = Path(getattr(settings, setting))
    name = f"HYDRIA_{setting.upper()}"
    existing = next(p for p in (path, *path.parents) if os.path.exists(p))  # False where it cannot look
    if existing == path and not path.is_dir():
        return Check(name, "fail", f"{path} is not a directory", f"remove it or set {name} elsewhere")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" (it does not exist and {existing} is not writable)"
        return Check(name, "fail", f"{path} is not writable{where}",
                     f"set {name} to a directory this user can write, "
                     f"e.g. /tmp/hydria-$UID/{setting.removesuffix('_path')}")
    if existing == path and path.stat().st_uid != os.geteuid() and setting != "temp_path":
        return Check(name, "fail", f"{path} belongs to another user", f"remove it or set {name} elsewhere")
    return Check(name, "ok", str(path) if existing == path else f"{path} (will be created)")


def check_configuration(settings: Settings) -> Check:
    """The configuration folders: enroot's own hooks and mount files, kept from enroot, are left
    out at every start (hooks/scripts.py), which says so each time."""
    from hydria.hooks.scripts import enroot_own_files

    name = "configuration"
    left_out = enroot_own_files(settings)
    folders = f"{settings.sysconf_path}, {settings.config_path}"
    if left_out:
        return Check(name, "warn", f"{folders}: enroot's own files, left out at every start with a warning: "
                     f"{', '.join(left_out)}", "remove them: hydria does their work itself (docs/migration.md)")
    return Check(name, "ok", folders)
