"""What hooks.d scripts did to the environment file (hooks/scripts.py): the edits that the start
applies over the container's environment."""

from __future__ import annotations

from hydria.hooks.scripts import _changes

WRITTEN = 'PATH=/usr/bin:/bin\nQUOTED="a b"\nDROPPED=1\nSAME=x\n'


def test_changed_added_and_deleted_lines_are_the_hooks_edits() -> None:
    after = 'PATH=/site/bin:/usr/bin:/bin\nQUOTED="a b"\nSAME=x\nNEW=1\nSAME=x\n'
    assert _changes(WRITTEN, after) == (("PATH", "/site/bin:/usr/bin:/bin"), ("NEW", "1"), ("DROPPED", None))


def test_a_name_appended_again_takes_its_last_value() -> None:
    assert _changes(WRITTEN, WRITTEN + "SAME=y\nSAME=x\nPATH=/hook\n") == (("PATH", "/hook"),)


def test_an_untouched_file_is_no_edit() -> None:
    assert _changes(WRITTEN, WRITTEN) == ()
    assert _changes("", "") == ()
