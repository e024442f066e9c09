"""``Record``: ``typing.NamedTuple`` for the modules on the start path, without importing ``typing``.

Importing ``typing`` (and the ``re`` it pulls in) costs a start a good part of its budget
(docs/runtime.md, start latency). At run time a ``Record`` subclass is made the way
``typing.NamedTuple`` makes one, with ``collections.namedtuple`` (fields from the annotations,
defaults from the class body, methods copied over); for type checkers it *is*
``typing.NamedTuple``. Methods must not use ``super()``. Modules off the start path use
``typing`` as usual; ``TYPE_CHECKING`` here serves the ones on it.
"""

from __future__ import annotations

from collections import namedtuple

__all__ = ["TYPE_CHECKING", "Record"]

TYPE_CHECKING = False  # mypy takes any constant of this name as true

if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    _NOT_COPIED = frozenset({"__annotations__", "__module__", "__qualname__", "__dict__", "__weakref__"})

    class _RecordType(type):
        def __new__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, object]) -> type:
            if not bases:
                return super().__new__(cls, name, bases, namespace)
            fields = list(namespace.get("__annotations__", {}))
            if any(hasattr(tuple, field) for field in fields):
                raise TypeError(f"{name}: a field may not take the name of a tuple method (index, count)")
            defaults = [namespace[field] for field in fields if field in namespace]
            if any(field not in namespace for field in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{name}: fields without a default follow fields with one")
            record = namedtuple(name, fields, defaults=defaults, module=str(namespace["__module__"]))
            for key, value in namespace.items():
                if key not in fields and key not in _NOT_COPIED:
                    setattr(record, key, value)
            record.__annotations__ = namespace.get("__annotations__", {})
            record.__qualname__ = str(namespace["__qualname__"])
            return record

    class Record(metaclass=_RecordType):
        pass
