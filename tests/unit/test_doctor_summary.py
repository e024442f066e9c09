"""The last line of doctor's table says what its warnings and failures mean, not only a count."""

from __future__ import annotations

from hydria.doctor import Check, summary

OK, WARN, FAIL = Check("a", "ok", ""), Check("b", "warn", "", "fix b"), Check("c", "fail", "", "fix c")


def test_all_passed() -> None:
    assert summary([OK, Check("gpu", "skip", "")]) == "all checks passed"


def test_warnings_say_that_containers_start_and_what_the_warnings_mean() -> None:
    line = summary([OK, WARN, WARN])
    assert line.startswith("all checks passed, with 2 warning(s): containers start here")
    assert "fix line says how to mend it" in line


def test_failures_come_first() -> None:
    assert summary([WARN, FAIL]).startswith("1 check(s) failed: ")
