"""Sizes: the one parser of what users write and the one formatter of what hydria prints."""

from __future__ import annotations

import pytest

from hydria.units import format_size, parse_size, setting_size


@pytest.mark.parametrize(("text", "size"), [
    ("500G", 500 << 30), ("1.5T", int(1.5 * (1 << 40))), ("4096", 4096), ("0", 0), ("2GiB", 2 << 30),
    ("10 M", 10 << 20), ("128k", 128 << 10), ("1MB", 1 << 20), ("", None), ("lots", None), ("-1G", None),
    ("nan", None), ("inf", None), ("G", None),
])
def test_sizes_are_read_in_powers_of_1024(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (3 << 20, "3.00 MiB"), (int(45.6 * (1 << 20)), "45.6 MiB"),
    (40 << 30, "40.0 GiB"), (int(1.23 * (1 << 30)), "1.23 GiB"), (3 << 40, "3.00 TiB"),
])
def test_sizes_are_printed_in_binary_units(count: int, text: str) -> None:
    assert format_size(count) == text


@pytest.mark.parametrize(("count", "text"), [(40 << 30, "40G"), (1536 << 20, "1536M"), (4096, "4K"), (4097, "4097"),
                                             (0, "0"), (3 << 40, "3T")])
def test_a_size_setting_is_shown_as_it_is_written(count: int, text: str) -> None:
    assert setting_size(count) == text
    assert parse_size(text) == count
