"""``hydria install-apparmor``: the AppArmor profile that lets hydria make user namespaces where
the kernel restricts them (hydria/apparmor.py says why it attaches to the ``hydria`` script)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hydria import apparmor
from hydria.errors import HydriaError, UsageError
from hydria.paths import staging_file
from hydria.tools import run_tool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write hydria's AppArmor profile to /etc/apparmor.d/hydria and load it, so that "
                          "ordinary users can run hydria on a node where "
                          "kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 24.04, DGX OS 7) without "
                          "lifting the restriction for every program. The profile names this installation's "
                          "hydria script: run it as root, again after hydria moves (docs/install.md).")
    parser.add_argument("--print", action="store_true", help="print the profile instead (to review it, or to "
                        "install it with your configuration management)")
    parser.add_argument("--folder", default=apparmor.PROFILE_FOLDER, metavar="DIR",
                        help=f"where to write the profile (default {apparmor.PROFILE_FOLDER})")
    parser.add_argument("--no-load", action="store_true", help="write the profile without loading it")


def run(options: argparse.Namespace) -> int:
    script = apparmor.script_path()
    if script is None:
        raise UsageError("hydria runs from a source tree (python -m hydria): no hydria script to attach a profile to",
                         hint="install hydria (docs/install.md) and run its hydria script")
    wrong = apparmor.attachment_problem(script)
    if wrong:
        raise UsageError(f"an AppArmor profile cannot name {script}: {wrong}",
                         hint="install hydria under a plain path (letters, digits, '/', '-', '_', '.')")
    text = apparmor.profile_text(script)
    if options.print:
        print(text, end="")
        return 0
    target = os.path.join(options.folder, apparmor.PROFILE)
    _write(target, text)
    print(f"wrote {target}")
    if options.no_load:
        return 0
    if not os.path.isdir("/sys/kernel/security/apparmor"):
        print("AppArmor is not in this kernel: the profile is written, not loaded")
        return 0
    run_tool(["apparmor_parser", "-r", "-W", target], f"apparmor_parser cannot load {target}",
             hint="install the apparmor package (AppArmor 4: Ubuntu 24.04 or newer)")
    print(f"loaded the profile {apparmor.PROFILE}: hydria makes user namespaces here")
    return 0


def _write(target: str, text: str) -> None:
    """Write ``target`` whole or not at all (a new file beside it, renamed over it)."""
    staging = None
    try:
        staging = staging_file(Path(target), "install-apparmor")
        staging.write_text(text)
        staging.chmod(0o644)
        os.replace(staging, target)
    except OSError as e:
        if staging is not None:
            staging.unlink(missing_ok=True)
        raise HydriaError(f"cannot write {target}: {e.strerror}",
                          hint="run it as root, or give --folder DIR (or --print)") from None
