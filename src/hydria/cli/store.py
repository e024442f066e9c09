"""``hydria store ACTION``: the image store that every user reads and one account writes
(docs/store.md). As that account (``HYDRIA_STORE_OWNER``):

* ``init``: make the store's folders in ``HYDRIA_STORE_PATH``;
* ``import [-a ARCH] URI``: import a registry image into the store (once: importers on other
  nodes wait for the one that runs), print the entry's path;
* ``list [--json]``: the images in the store.
"""

from __future__ import annotations

import argparse
import json
import time

from hydria.config import Settings
from hydria.errors import HydriaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("init", help="make the store's folders (as its owner)")
    importing = actions.add_parser("import", help="import a registry image into the store (as its owner)")
    importing.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    importing.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]")
    listing = actions.add_parser("list", help="the images in the store")
    listing.add_argument("--json", action="store_true", help="one JSON object per image, in an array")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.image.imagestore import ImageStore

    if not settings.store_path:
        raise HydriaError("no image store is set", hint="set HYDRIA_STORE_PATH in the system's hydria.conf "
                                                        "(docs/store.md)")
    if options.action == "import":
        from hydria.image.importer import import_into_store

        print(import_into_store(options.uri, settings, arch=options.arch))
        return 0
    store = ImageStore(settings.store_path, settings.store_owner)
    if options.action == "init":
        store.initialise()
        print(store.root)
        return 0
    entries = store.entries()
    if options.json:
        print(json.dumps([{"key": e.key, "path": str(e.path), "size": e.size, "uri": e.uri, "digest": e.digest,
                           "created": e.created} for e in entries], indent=1))
        return 0
    for entry in entries:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.created))
        print(f"{entry.key[:12]}  {entry.size / 1e6:9.1f} MB  {created}  {entry.uri}")
    return 0
