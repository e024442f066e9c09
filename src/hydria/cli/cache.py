"""``hydria cache ACTION``: what this user keeps in the cache (``HYDRIA_CACHE_PATH``).

* ``list [--json]``: the blobs and the kept images (docs/import.md), their sizes;
* ``prune [--to SIZE] [--dry-run]``: remove the least recently used of them down to SIZE (default
  0: all that may go), never a kept image a container of this node has mounted, nor anything used
  in the last ``GRACE`` seconds (an import may be about to read it). In a shared cache only the
  user's own files count.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hydria.cli.store import size_argument
from hydria.config import Settings
from hydria.image.imagecache import SUFFIX, ImageCache
from hydria.image.prune import Item, item, regular_files, remove, victims

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
    kept = ImageCache(root, settings.cache_images).directory
    blobs, images = _own_files(root / "blobs" / "sha256", "*"), _own_files(kept, f"*{SUFFIX}")
    if options.action == "list":
        blob_bytes, image_bytes = sum(i.size for i in blobs), sum(i.size for i in images)
        if options.json:
            print(json.dumps({"path": str(root), "blobs": len(blobs), "blob_bytes": blob_bytes,
                              "images": len(images), "image_bytes": image_bytes}, indent=1))
        else:
            print(f"{root}: {len(blobs)} blob(s), {blob_bytes / 1e6:.1f} MB; "
                  f"{len(images)} kept image(s), {image_bytes / 1e6:.1f} MB")
        return 0
    gone = victims([*blobs, *images], options.to, GRACE)
    if not options.dry_run:
        remove(gone)
    verb = "would remove" if options.dry_run else "removed"
    left = sum(i.size for i in (*blobs, *images)) - sum(i.size for i in gone)
    print(f"{verb} {len(gone)} file(s), {sum(i.size for i in gone) / 1e6:.1f} MB; "
          f"your share of {root} is {left / 1e6:.1f} MB")
    return 0


def _own_files(folder: Path, pattern: str) -> list[Item]:
    names = folder.glob(pattern) if folder.is_dir() else iter(())
    return [item(path, info) for path, info in regular_files(names, os.geteuid())]
