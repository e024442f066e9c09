"""What hooks.d scripts did to the environment file (hooks/scripts.py): the edits that the start
applies over the container's environment."""

from __future__ import annotations

from pathlib import Path

from hydria.hooks.scripts import _changes, environment_text
from hydria.paths import read_text

WRITTEN = 'PATH=/usr/bin:/bin\nQUOTED="a b"\nDROPPED=1\nSAME=x\n'


def test_changed_added_and_deleted_lines_are_the_hooks_edits() -> None:
    after = 'PATH=/site/bin:/usr/bin:/bin\nQUOTED="a b"\nSAME=x\nNEW=1\nSAME=x\n'
    assert _changes(WRITTEN, after) == (("PATH", "/site/bin:/usr/bin:/bin"), ("NEW", "1"), ("DROPPED", None))


def test_a_name_appended_again_takes_its_last_value() -> None:
    assert _changes(WRITTEN, WRITTEN + "SAME=y\nSAME=x\nPATH=/hook\n") == (("PATH", "/hook"),)


def test_an_untouched_file_is_no_edit() -> None:
    assert _changes(WRITTEN, WRITTEN) == ()
    assert _changes("", "") == ()


def test_the_file_holds_what_a_line_can_hold_and_reads_back_unchanged(tmp_path: Path) -> None:
    environment = {"PLAIN": "a b", "BYTES": "caf\udce9", "QUOTED": '"x"', "EMPTY": "",
                   "NEWLINE": "a\nb", "RETURN": "a\rb", "FEED": "a\x0cb"}
    text = environment_text(environment)
    assert text == 'PLAIN=a b\nBYTES=caf\udce9\nQUOTED="x"\nEMPTY=\n'
    path = tmp_path / "environment"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    assert _changes(text, read_text(str(path))) == ()
