"""Reading a bundle's config.json field by field: each reader checks one JSON type and names the
field in its error, so that every refusal says exactly what to change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hydria.errors import HydriaError

UNDONE_HINT = ("hydria runs a bundle as an ordinary user's container: remove the field from config.json "
               "(docs/slurm.md lists what hydria does)")


class BundleError(HydriaError):
    pass


def only_known(mapping: Mapping[str, Any], known: frozenset[str], prefix: str) -> None:
    """Refuse a key outside ``known``, named as ``prefix`` + key (``"PATH: process."``)."""
    for key in mapping:
        if key not in known:
            raise BundleError(f"{prefix}{key} is a field hydria does not do", hint=UNDONE_HINT)


def mapping_field(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BundleError(f"{field} is not a JSON object" if value is not None else f"{field} is missing")
    return value


def list_field(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise BundleError(f"{field} is not a list")
    return value


def string_field(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise BundleError(f"{field} is not a non-empty string" if value is not None else f"{field} is missing")
    return value


def strings_field(value: Any, field: str) -> list[str]:
    items = list_field(value, field)
    for index, item in enumerate(items):
        if not isinstance(item, str) or "\0" in item:
            raise BundleError(f"{field}[{index}] is not a string")
    return items


def number_field(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BundleError(f"{field} is not a number of 0 or more")
    return value


def numbers_field(value: Any, field: str) -> Sequence[int]:
    return [number_field(item, f"{field}[{index}]") for index, item in enumerate(list_field(value, field))]


def boolean_field(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise BundleError(f"{field} is not true or false")
    return value
