"""hydria doctor's configuration check: enroot's own hooks and mount files, left out at each start."""

from __future__ import annotations

from pathlib import Path

from hydria.config import load_settings
from hydria.doctor.folders import check_configuration
from hydria.doctor.images import check_image_policy
from hydria.doctor.report import Check


def test_enroots_own_files_in_a_kept_folder_are_a_warning_with_the_fix(tmp_path: Path) -> None:
    settings = load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path / "etc"),
                              "HYDRIA_CONFIG_PATH": str(tmp_path / "config")})
    assert check_configuration(settings).status == "ok"
    (tmp_path / "etc/hooks.d").mkdir(parents=True)
    (tmp_path / "etc/hooks.d/50-site.sh").write_text("#!/bin/sh\n")
    (tmp_path / "etc/hooks.d/98-nvidia.sh").write_text("#!/bin/sh\n")
    (tmp_path / "config/mounts.d").mkdir(parents=True)
    (tmp_path / "config/mounts.d/10-system.fstab").write_text("")
    check = check_configuration(settings)
    assert check.status == "warn" and "docs/migration.md" in check.fix
    assert check.detail.endswith(f"{tmp_path}/etc/hooks.d/98-nvidia.sh, {tmp_path}/config/mounts.d/10-system.fstab")


def test_the_image_policy_check_says_what_the_policy_lets_in_or_why_no_import_runs(tmp_path: Path) -> None:
    settings = load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path)})
    assert check_image_policy(settings).status == "skip"
    (tmp_path / "policy.json").write_text('{"default": [{"type": "reject"}], '
                                          '"transports": {"docker": {"nvcr.io": [{"type": "insecureAcceptAnything"}]}}}')
    check = check_image_policy(settings)
    assert check == Check("image policy", "ok", f"{tmp_path / 'policy.json'}: 1 scope(s), default reject")
    (tmp_path / "policy.json").write_text('{"default": [{"type": "signedBy", "keyPath": "/k"}]}')
    check = check_image_policy(settings)
    assert check.status == "fail" and "asks for a GPG signature (signedBy)" in check.detail and check.fix
