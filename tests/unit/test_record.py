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


def test_the_rest_of_namedtuples_interface() -> None:
    """What hydria uses of namedtuple besides fields: repr, _asdict, _make, pickling, and the
    errors a constructor gives for arguments it cannot take."""
    import pickle

    point = Point(1, label="p")
    assert repr(point) == "Point(x=1, y=0, label='p')" and point._asdict() == {"x": 1, "y": 0, "label": "p"}
    assert Point._make([1, 2, "q"]) == Point(1, 2, "q") and pickle.loads(pickle.dumps(point)) == point
    assert hash(point) == hash((1, 0, "p")) and point[2] == "p"
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 3 arguments"):
        Point(1, 2, "a", 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="expected 3 values"):
        Point._make([1])
    with pytest.raises(ValueError, match="unexpected field names"):
        point._replace(z=1)  # type: ignore[call-arg]
