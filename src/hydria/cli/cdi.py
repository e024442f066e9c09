"""``hydria cdi list [--json]``: the CDI devices of this node (``HYDRIA_CDI_SPEC_DIRS``), which
``hydria start --device`` gives a container, and the specs left out with why (docs/devices.md)."""

from __future__ import annotations

import argparse
import json

from hydria.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the devices, by the names --device takes")
    listing.add_argument("--json", action="store_true", help="one JSON object: devices, invalid specs, conflicts")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.hooks import cdi

    dirs = cdi.spec_dirs(settings.cdi_spec_dirs)
    registry = cdi.load(dirs)
    if options.json:
        print(json.dumps({"spec_dirs": dirs,
                          "devices": [{"name": name, "spec": spec.path, "cdiVersion": spec.version}
                                      for name, (spec, _) in sorted(registry.devices.items())],
                          "invalid": registry.invalid, "conflicts": registry.conflicts}, indent=1))
        return 0
    for name, (spec, _) in sorted(registry.devices.items()):
        print(f"{name}  ({spec.path})")
    if not registry.devices:
        print(f"no CDI devices in {', '.join(dirs) or '(no folder: HYDRIA_CDI_SPEC_DIRS is empty)'}")
    for _, why in sorted(registry.invalid.items()):
        print(f"left out: {why}")
    for name, paths in sorted(registry.conflicts.items()):
        print(f"unusable: {name}, defined by {' and '.join(paths)}")
    return 1 if registry.invalid or registry.conflicts else 0
