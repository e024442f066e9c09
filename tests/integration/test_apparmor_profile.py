"""hydria's AppArmor profile (hydria/apparmor.py), as ``hydria install-apparmor`` writes it,
compiled by AppArmor 4's own parser (testbed/apparmor.py). This kernel has no AppArmor: that the
loaded profile lets the hydria script make user namespaces is not proven here
(tests/unit/test_apparmor.py tests the rest of the mechanism)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed import apparmor

pytestmark = pytest.mark.integration


def test_the_installed_profile_names_the_hydria_script_and_compiles(tmp_path: Path, hydria_bin: str) -> None:
    hydria = os.path.realpath(hydria_bin)  # AppArmor matches the path with its links resolved
    written = subprocess.run([hydria, "install-apparmor", "--folder", str(tmp_path), "--no-load"],
                             capture_output=True, text=True, check=False)
    assert written.returncode == 0, written.stderr
    profile = tmp_path / "hydria"
    assert f'profile hydria "{hydria}" flags=(unconfined) {{' in profile.read_text()
    assert oct(profile.stat().st_mode & 0o777) == "0o644" and os.listdir(tmp_path) == ["hydria"]
    printed = subprocess.run([hydria, "install-apparmor", "--print"], capture_output=True, text=True, check=True)
    assert printed.stdout == profile.read_text()
    compiled = subprocess.run([*apparmor.parser(), str(profile)], capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr
    broken = tmp_path / "broken"
    broken.write_text(profile.read_text().replace("userns,", "userns, no_such_rule,"))
    refused = subprocess.run([*apparmor.parser(), str(broken)], capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "syntax error" in refused.stderr, "the parser checks what it is given"


def test_a_folder_that_cannot_be_written_is_named_and_nothing_is_left(tmp_path: Path, hydria_bin: str) -> None:
    missing = tmp_path / "no-such-folder"
    result = subprocess.run([hydria_bin, "install-apparmor", "--folder", str(missing)],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0 and f"cannot write {missing}/hydria" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not missing.exists()
