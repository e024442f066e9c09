"""``Record``: ``typing.NamedTuple`` for the modules on the start path, without importing ``typing``
or ``collections``.

Importing ``typing`` (and the ``re`` it pulls in) costs a start a good part of its budget, and
``collections.namedtuple`` costs it the import of ``collections`` and an ``eval`` per class, a
tenth of the start for the two dozen classes on its path (docs/performance.md, "Where a start's
time goes"). At run time a ``Record`` subclass is a tuple subclass made here: fields from the
annotations, defaults from the class body, one accessor per field (the C one that namedtuple
uses), methods copied over, and the part of namedtuple's interface that hydria uses (``_fields``,
``_field_defaults``, ``_replace``, ``_asdict``, ``_make``, its ``repr``). For type checkers it
*is* ``typing.NamedTuple``. Methods must not use ``super()``. Modules off the start path use
``typing`` as usual; ``TYPE_CHECKING`` here serves the ones on it.
"""

from __future__ import annotations

__all__ = ["TYPE_CHECKING", "Record"]

TYPE_CHECKING = False  # mypy takes any constant of this name as true

if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    try:
        from _collections import _tuplegetter  # what collections.namedtuple's fields are
    except ImportError:  # another Python than CPython
        from operator import itemgetter

        def _tuplegetter(index: int, doc: str) -> property:
            return property(itemgetter(index), doc=doc)

    _NOT_COPIED = frozenset({"__annotations__", "__module__", "__qualname__", "__dict__", "__weakref__"})

    class _Fields(tuple):
        """What every record class has: a tuple whose items are named by ``_fields``."""

        __slots__ = ()  # each class made by _RecordType sets _fields and _field_defaults

        def __new__(cls, *args: object, **named: object) -> tuple[object, ...]:
            fields = cls._fields
            if len(args) == len(fields) and not named:
                return tuple.__new__(cls, args)
            if len(args) > len(fields):
                raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments but {len(args)} were given")
            values = list(args)
            for field in fields[len(args):]:
                if field in named:
                    values.append(named.pop(field))
                elif field in cls._field_defaults:
                    values.append(cls._field_defaults[field])
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument: {field!r}")
            if named:  # a name left: one given twice, or none of the fields
                field = next(iter(named))
                problem = "multiple values for" if field in fields else "an unexpected keyword"
                raise TypeError(f"{cls.__name__}() got {problem} argument {field!r}")
            return tuple.__new__(cls, values)

        @classmethod
        def _make(cls, iterable: object) -> tuple[object, ...]:
            values = tuple(iterable)  # type: ignore[call-overload]
            if len(values) != len(cls._fields):
                raise TypeError(f"{cls.__name__}: expected {len(cls._fields)} values, got {len(values)}")
            return tuple.__new__(cls, values)

        def _replace(self, **changes: object) -> tuple[object, ...]:
            values = [changes.pop(field, value) for field, value in zip(self._fields, self)]
            if changes:
                raise ValueError(f"{type(self).__name__}: unexpected field names {list(changes)!r}")
            return tuple.__new__(type(self), values)

        def _asdict(self) -> dict[str, object]:
            return dict(zip(self._fields, self))

        def __repr__(self) -> str:
            shown = ", ".join(f"{field}={value!r}" for field, value in zip(self._fields, self))
            return f"{type(self).__name__}({shown})"

        def __getnewargs__(self) -> tuple[object, ...]:
            return tuple(self)

    class _RecordType(type):
        def __new__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, object]) -> type:
            if not bases:
                return super().__new__(cls, name, bases, namespace)
            annotations = namespace.get("__annotations__", {})
            fields = tuple(annotations)  # type: ignore[arg-type]
            if any(hasattr(tuple, field) for field in fields):
                raise TypeError(f"{name}: a field may not take the name of a tuple method (index, count)")
            defaults = {field: namespace[field] for field in fields if field in namespace}
            if any(field not in namespace for field in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{name}: fields without a default follow fields with one")
            body = {key: value for key, value in namespace.items() if key not in fields and key not in _NOT_COPIED}
            body.update(__slots__=(), _fields=fields, _field_defaults=defaults, __annotations__=annotations,
                        __module__=namespace["__module__"], __qualname__=namespace["__qualname__"])
            for index, field in enumerate(fields):
                body[field] = _tuplegetter(index, f"Alias for field number {index}")
            return type(name, (_Fields,), body)

    class Record(metaclass=_RecordType):
        pass
