"""AppArmor's restriction of user namespaces (hydria/apparmor.py). This kernel has no AppArmor:
the files it would give (the sysctl, the process's label) are files the test writes, a fake where
the real thing cannot exist; the profile itself is compiled by AppArmor 4's parser in
tests/integration/test_apparmor_profile.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hydria import apparmor
from hydria.doctor.host import check_user_namespaces


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose ``restrict`` and ``label`` files stand for the kernel's."""
    monkeypatch.setattr(apparmor, "RESTRICTION", str(tmp_path / "restrict"))
    monkeypatch.setattr(apparmor, "LABELS", (str(tmp_path / "label"), str(tmp_path / "old-label")))
    return tmp_path


@pytest.mark.parametrize(("restriction", "label", "blocked"), [
    ("1\n", "unconfined\n", True),
    ("1\n", "hydria (unconfined)\n", False),  # the profile attached to the hydria script
    ("1\n", None, True),  # a label the kernel does not give: nothing says the profile attached
    ("0\n", "unconfined\n", False),
    (None, None, False),  # no AppArmor
])
def test_hydria_is_blocked_where_the_restriction_is_on_and_its_profile_did_not_attach(
        kernel: Path, restriction: str | None, label: str | None, blocked: bool) -> None:
    if restriction is not None:
        (kernel / "restrict").write_text(restriction)
    if label is not None:
        (kernel / "label").write_text(label)
    assert apparmor.blocked() is blocked
    check = check_user_namespaces()
    assert check.status == ("fail" if blocked else "ok"), check
    if blocked:
        assert "AppArmor restricts unprivileged user namespaces" in check.detail
        assert check.fix == "as root: hydria install-apparmor (docs/install.md)"
    error = apparmor.namespace_error("cannot create the container's namespaces: Operation not permitted")
    if blocked:
        assert error.hint == apparmor.FIX and "AppArmor restricts" in error.message
    else:  # not AppArmor's doing: the kernel's settings
        assert error.hint != apparmor.FIX and "AppArmor" not in error.message
        assert error.hint is not None and "user.max_user_namespaces" in error.hint
    if restriction == "1\n" and not blocked:
        assert "AppArmor profile (hydria)" in check.detail


def test_the_label_is_read_from_the_older_interface_too(kernel: Path) -> None:
    (kernel / "old-label").write_text("hydria (unconfined)\n")
    assert apparmor.own_label() == "hydria"


@pytest.mark.parametrize(("script", "said"), [
    ("/opt/hydria/bin/hydria", None),
    ("/opt/hydria 2/bin/hydria", None),  # quoted in the profile
    ("bin/hydria", "not an absolute path"),
    ("/opt/hydria*/bin/hydria", "'*'"),
    ('/opt/"x"/hydria', "'\"'"),
    ("/opt/{a,b}/hydria", "'{'"),
])
def test_a_script_path_a_profile_cannot_attach_to_is_named(script: str, said: str | None) -> None:
    found = apparmor.attachment_problem(script)
    assert found is None if said is None else said in (found or ""), found


def test_the_profile_attaches_to_the_script_and_allows_user_namespaces() -> None:
    text = apparmor.profile_text("/opt/hydria/bin/hydria")
    assert 'profile hydria "/opt/hydria/bin/hydria" flags=(unconfined) {' in text
    assert "  userns,\n" in text and "abi <abi/4.0>," in text
