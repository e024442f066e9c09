"""Which subordinate IDs a build maps: the lines of /etc/subuid and /etc/subgid, as a table."""

from __future__ import annotations

import pytest

from hydria.imagebuild.idmap import subordinate_range

SUBUID = """\
alice:100000:65536
1001:165536:65536
bob:231072:0
carol:not-a-number:65536
dave:0:65536
bob:300000:1000
"""


@pytest.mark.parametrize(("name", "uid", "expected"), [
    ("alice", 1000, (100000, 65536)),     # by name
    ("someone", 1001, (165536, 65536)),   # by number
    ("bob", 1002, (300000, 1000)),        # an empty range is skipped for the next
    ("carol", 1003, None),                # a malformed line gives nothing
    ("dave", 1004, None),                 # nor does a range from 0 (root's own IDs)
    ("erin", 1005, None),                 # not listed: one ID is mapped
])
def test_the_first_usable_range_of_the_user(name: str, uid: int, expected: tuple[int, int] | None) -> None:
    assert subordinate_range(SUBUID, name, uid) == expected
