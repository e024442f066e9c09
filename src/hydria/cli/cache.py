"""``hydria cache ACTION``: what this user keeps in the cache (``HYDRIA_CACHE_PATH``).

* ``list [--json]``: the kept images, one row each (cli/kept_images.py), and the totals of the
  blobs, the kept images (docs/import.md) and the build cache (layers, base
  images and ``RUN --mount=type=cache`` folders of ``hydria build``: docs/build.md), their sizes;
  and this node's read cache (images unpacked behind their containers, ``HYDRIA_READ_CACHE_PATH``);
* ``prune [--to SIZE] [--dry-run]``: remove the least recently used of them down to SIZE (default
  0: all that may go; a layered image with the layer images that only it names, a layer image
  that several name with the last of them), never a kept image a container of this node has mounted nor an unpacked
  image a container reads, nor anything used in the last ``GRACE`` seconds (an import may be about
  to read it). In a shared cache only the user's own files count. Unpacks that were stopped and
  the markers of images that could not be unpacked go too.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hydria.cli.kept_images import as_json, size_argument, table
from hydria.config import Settings
from hydria.container import read_cache
from hydria.image.kept.prune import Item, item, mounted_images, regular_files, remove, victims
from hydria.image.kept.user_cache import ImageCache
from hydria.imagebuild import cache as build_cache
from hydria.imagebuild import idmap
from hydria.units import format_size

GRACE = 600.0  # seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the blobs and kept images in your cache, and their sizes")
    listing.add_argument("--json", action="store_true", help="as a JSON object")
    pruning = actions.add_parser("prune", help="remove the least recently used blobs and kept images")
    pruning.add_argument("--to", metavar="SIZE", type=size_argument, default=0,
                         help="the size to bring your share of the cache down to, e.g. 20G (default: 0)")
    pruning.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")


def run(options: argparse.Namespace, settings: Settings) -> int:
    root = Path(settings.cache_path)
    kept = ImageCache(root, settings.cache_images)
    blobs = _own_files(root / "blobs" / "sha256", "*")
    images, shared_layers = kept.prune_items()
    ids = idmap.of_this_user(settings.build_subordinate_ids)
    built = build_cache.entries(str(root), ids)
    reads = read_cache.configured(settings)
    unpacked = read_cache.entries(reads) if reads else []
    if options.action == "list":
        blob_bytes, image_bytes = sum(i.size for i in blobs), sum(i.size for i in images) + shared_layers
        build_bytes, unpacked_bytes = sum(e.item.size for e in built), sum(i.size for i in unpacked)
        if options.json:
            print(json.dumps({"path": str(root), "blobs": len(blobs), "blob_bytes": blob_bytes,
                              "images": len(images), "image_bytes": image_bytes, "kept": as_json(kept.listing()),
                              "build": {kind: sum(1 for e in built if e.kind == kind)
                                        for kind in ("layer", "base", "output", "mount")},
                              "build_bytes": build_bytes,
                              "unpacked": {"path": reads.folder if reads else None, "images": len(unpacked),
                                           "bytes": unpacked_bytes}}, indent=1))
        else:
            for line in table(kept.listing()):
                print(line)
            print(f"{root}: {len(blobs)} blob(s), {format_size(blob_bytes)}; "
                  f"{len(images)} kept image(s), {format_size(image_bytes)}; "
                  f"build cache (hydria build) {len(built)} entries, {format_size(build_bytes)}")
            if reads:
                print(f"{reads.folder}: {len(unpacked)} unpacked image(s) of this node, {format_size(unpacked_bytes)}")
        return 0
    everything = [*blobs, *images, *(e.item for e in built), *unpacked]

    def in_use() -> set[str]:
        mounted = mounted_images()
        return mounted | kept.layered_in_use(mounted) | (read_cache.in_use(reads) if reads else set())
    # Layer images that several kept images name go with the last of them: they count, they are no candidate.
    gone = victims(everything, options.to - shared_layers, GRACE, in_use)
    if not options.dry_run:
        chosen = {i.path for i in gone}
        built_paths, unpacked_paths = {e.item.path for e in built}, {i.path for i in unpacked}
        remove([i for i in gone if i.path not in built_paths | unpacked_paths])
        kept.collect_layers()
        build_cache.remove_entries([e for e in built if e.item.path in chosen], ids)
        if reads:
            gone = [i for i in gone if i.path not in unpacked_paths or read_cache.remove_entry(reads, str(i.path))]
            for leftover in read_cache.leftovers(reads):
                read_cache.remove(leftover)
    verb = "would remove" if options.dry_run else "removed"
    left = sum(i.size for i in everything) + shared_layers - sum(i.size for i in gone)
    if options.quiet:
        return 0
    print(f"{verb} {len(gone)} file(s), {format_size(sum(i.size for i in gone))}; "
          f"your share of {root} is {format_size(left)}")
    return 0


def _own_files(folder: Path, pattern: str) -> list[Item]:
    names = folder.glob(pattern) if folder.is_dir() else iter(())
    return [item(path, info) for path, info in regular_files(names, os.geteuid())]
