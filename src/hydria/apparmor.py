"""AppArmor's restriction on user namespaces (Ubuntu 24.04, DGX OS 7), and hydria's profile for it.

Where ``kernel.apparmor_restrict_unprivileged_userns`` is 1, a program that no profile allows
``userns`` gets a user namespace without capabilities: hydria could mount nothing in it. The
profile that ``hydria install-apparmor`` writes attaches to hydria's own ``hydria`` script, not
to the Python interpreter: AppArmor picks a profile by the file that ``exec`` was given, a script
included, and the interpreter then runs under the script's profile. So ``hydria`` commands get
the right and other programs of the same Python do not. Like Ubuntu's own profiles for podman,
buildah and ch-run, it names hydria and allows ``userns`` without confining anything else
(``flags=(unconfined)``), so what hydria runs (tools, the container's programs) runs as before
(docs/install.md).
"""

from __future__ import annotations

import os
import re

from hydria.errors import HydriaError

RESTRICTION = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
LABELS = ("/proc/self/attr/apparmor/current", "/proc/self/attr/current")  # the newer interface first
PROFILE = "hydria"
PROFILE_FOLDER = "/etc/apparmor.d"
FIX = "as root: hydria install-apparmor (docs/install.md)"
# What AppArmor reads as a pattern, or cannot take in a quoted path, in an attachment
UNSAFE_IN_ATTACHMENT = re.compile(r'[*?\[\]{}^"\\@\n\0]')


def restricted() -> bool:
    """Whether AppArmor restricts unprivileged user namespaces on this node."""
    try:
        with open(RESTRICTION) as handle:
            return handle.read().strip() == "1"
    except OSError:
        return False


def own_label() -> str | None:
    """This process's AppArmor label without its mode (``hydria``, ``unconfined``), or None
    where AppArmor is not in the kernel."""
    for path in LABELS:
        try:
            with open(path) as handle:
                label = handle.read().strip("\0\n ")
        except OSError:
            continue
        if label:
            return label.rsplit(" (", 1)[0]
    return None


def blocked() -> bool:
    """Whether AppArmor keeps this process from having capabilities in a user namespace of its
    own: the restriction is on and hydria's profile did not attach to it."""
    return restricted() and own_label() != PROFILE


def problem(script: str | None) -> str:
    """Why this process is ``blocked()``, for a check or an error; ``script``: the ``hydria``
    script the profile attaches to (None where hydria runs from a source tree)."""
    if script is None:
        return ("AppArmor restricts unprivileged user namespaces, and hydria runs as python -m hydria, "
                "which no profile of hydria's attaches to")
    return (f"AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1) "
            f"and hydria's profile is not loaded for {script} (this process's label: {own_label()})")


def attachment_problem(script: str) -> str | None:
    """What in the script's path a profile cannot attach to as written; None where nothing."""
    if not os.path.isabs(script):
        return "it is not an absolute path"
    found = UNSAFE_IN_ATTACHMENT.search(script)
    return f"it holds {found.group()!r}, which AppArmor reads as a pattern" if found else None


def profile_text(script: str) -> str:
    """hydria's profile, attached to ``script`` (a real path: AppArmor matches the file's path
    with its links resolved)."""
    return f"""\
# hydria: unprivileged containers (docs/install.md). This profile allows everything; it only
# lets hydria's own script make user namespaces where the kernel restricts them
# (kernel.apparmor_restrict_unprivileged_userns=1), as Ubuntu's profiles for podman and ch-run do.
# Written by hydria install-apparmor: run it again after hydria moves.

abi <abi/4.0>,
include <tunables/global>

profile {PROFILE} "{script}" flags=(unconfined) {{
  userns,

  # Site-specific additions and overrides: /etc/apparmor.d/local/{PROFILE}
  include if exists <local/{PROFILE}>
}}
"""


def script_path() -> str | None:
    """The real path of the ``hydria`` script this process runs, which the profile attaches to;
    None where hydria runs from a source tree (``python -m hydria``)."""
    from hydria.paths import hydria_command

    command = hydria_command()
    return os.path.realpath(command[0]) if len(command) == 1 else None


def namespace_error(what: str) -> HydriaError:
    """The error for ``what`` failing (as "cannot create the container's namespaces"): AppArmor's
    restriction where that is the cause, else user namespaces that the kernel does not allow."""
    if blocked():
        return HydriaError(f"{what}: {problem(script_path())}", hint=FIX)
    return HydriaError(what, hint="unprivileged user namespaces must be enabled (sysctl user.max_user_namespaces)")
