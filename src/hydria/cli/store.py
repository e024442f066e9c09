"""``hydria store ACTION``: the image store that every user reads and one account writes
(docs/store.md). As that account (``HYDRIA_STORE_OWNER``):

* ``init``: make the store's folders in ``HYDRIA_STORE_PATH``;
* ``check``: whether an import into the store would find what it needs (``doctor`` runs it as the
  owner: the Slurm plugin's imports run as that account);
* ``import [-a ARCH] URI``: import a registry image into the store (once: importers on other
  nodes wait for the one that runs), print the entry's path;
* ``list [--json]``: the images in the store, one row each (cli/kept_images.py);
* ``prune [--to SIZE] [--dry-run]``: remove the least recently used images down to SIZE (default:
  the settings STORE_PRUNE_ABOVE and STORE_PRUNE_TO), never one in use (hydria/image/prune.py);
* ``keep-reads --trees FOLDER --reads-fd N`` (the Slurm plugin runs it for a step): keep in FOLDER
  what the step reads of a store image (hydria/container/store_trees.py).
"""

from __future__ import annotations

import argparse
import json
import os

from hydria.cli.kept_images import as_json, size_argument, table
from hydria.config import Settings
from hydria.errors import HydriaError
from hydria.paths import user_name
from hydria.record import TYPE_CHECKING
from hydria.units import format_size

if TYPE_CHECKING:
    from hydria.image.kept.store import ImageStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("init", help="make the store's folders (as its owner)")
    actions.add_parser("check", help="whether an import into the store would find what it needs (as its owner)")
    importing = actions.add_parser("import", help="import a registry image into the store (as its owner)")
    importing.add_argument("-a", "--arch", help="architecture of the image (default: this machine's)")
    importing.add_argument("uri", help="docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]")
    importing.add_argument("--marks-fd", type=int, help=argparse.SUPPRESS)  # the Slurm plugin's (slurm/shim.py)
    listing = actions.add_parser("list", help="the images in the store")
    listing.add_argument("--json", action="store_true", help="one JSON object per image, in an array")
    pruning = actions.add_parser("prune", help="remove the least recently used images (as its owner)")
    pruning.add_argument("--to", metavar="SIZE", type=size_argument,
                         help="the size to bring the store down to, e.g. 400G (default: HYDRIA_STORE_PRUNE_TO, "
                              "when the store holds more than HYDRIA_STORE_PRUNE_ABOVE)")
    pruning.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    keeping = actions.add_parser("keep-reads", help="keep on this node what a Slurm step reads of a store image "
                                                    "(as its owner; the Slurm plugin runs it)")
    keeping.add_argument("--trees", required=True, help="the node's folder of the store's images' trees "
                                                        "(plugstack store_trees)")
    keeping.add_argument("--reads-fd", required=True, type=int, help="the pipe the step names the files read on")


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.image.kept.store import ImageStore

    if not settings.store_path:
        raise HydriaError("no image store is set", hint="set HYDRIA_STORE_PATH in the system's hydria.conf "
                                                        "(docs/store.md)")
    if options.action == "check":
        from hydria.image.importer import check_store_import

        print(check_store_import(settings))
        return 0
    if options.action == "import":
        from hydria.image.importer import import_into_store

        tell = None
        if options.marks_fd is not None:
            from hydria.slurm.shim import MarkChannel

            tell = MarkChannel(options.marks_fd).log
        print(import_into_store(options.uri, settings, arch=options.arch, tell=tell))
        return 0
    if options.action == "keep-reads":
        from hydria.container.store_trees import keep_reads

        keep_reads(options.trees, options.reads_fd, settings)
        return 0
    store = ImageStore(settings.store_path, settings.store_owner)
    if options.action == "init":
        store.initialise()
        print(store.root)
        return 0
    if options.action == "prune":
        return _prune(store, options, settings)
    if not store.is_writer() and os.geteuid() != 0:
        raise HydriaError(f"only {user_name(store.owner_uid)} and root list the image store {store.root}",
                          hint="what it holds is private to them (docs/store.md); hydria doctor shows its state")
    images = store.listing()
    if options.json:
        print(json.dumps(as_json(images), indent=1))
        return 0
    for line in table(images) or [f"the image store {store.root} holds no images"]:
        print(line)
    return 0


def _prune(store: ImageStore, options: argparse.Namespace, settings: Settings) -> int:
    target = options.to
    if target is None:
        if not settings.store_prune_above:
            raise HydriaError("prune needs a size", hint="give --to SIZE, or set HYDRIA_STORE_PRUNE_ABOVE")
        target = store.prune_target(settings.store_prune_above, settings.store_prune_to)
        if target is None:
            print(f"the store holds no more than HYDRIA_STORE_PRUNE_ABOVE ({format_size(settings.store_prune_above)})")
            return 0
    gone = store.prune(target, dry_run=options.dry_run)
    verb = "would remove" if options.dry_run else "removed"
    if options.quiet:
        return 0
    for image in gone:
        print(f"{verb} {image.path} ({format_size(image.size)})")
    left = store.size_on_disk() - (sum(i.size for i in gone) if options.dry_run else 0)
    print(f"{verb} {len(gone)} image(s), {format_size(sum(i.size for i in gone))}; the store holds {format_size(left)}")
    return 0
