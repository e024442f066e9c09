"""hydria.record.Record behaves as typing.NamedTuple does, without importing typing."""

from __future__ import annotations

import pytest

from hydria.record import Record


class Point(Record):
    """A point."""

    x: int
    y: int = 0
    label: str = "origin"

    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)


def test_fields_defaults_and_methods() -> None:
    point = Point(3, y=-4)
    assert point == (3, -4, "origin") and isinstance(point, tuple)
    assert point.norm1() == 7 and Point._fields == ("x", "y", "label")
    assert Point._field_defaults == {"y": 0, "label": "origin"}
    assert point._replace(label="p") == Point(3, -4, "p")
    assert Point.__doc__ == "A point." and Point.__qualname__ == "Point" and Point.__module__ == __name__
    with pytest.raises(AttributeError):
        point.x = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="fields without a default"):
        class Bad(Record):
            a: int = 1
            b: int


def test_a_field_may_not_hide_a_tuple_method() -> None:
    """A field ``index`` would replace tuple.index on the class, and silently so at run time."""
    with pytest.raises(TypeError, match="index"):
        class Gpu(Record):
            index: int
