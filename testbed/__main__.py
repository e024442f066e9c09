"""``python -m testbed demo`` runs the README's main job; ``build NAME DIR`` writes a test image
as an OCI layout, OCI archive and docker archive into DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed.demo import run_demo
from testbed.oci import write_docker_archive, write_oci_archive, write_oci_layout
from testbed.recipes import RECIPES, get_image


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="build, serve, import and start the busybox test image")
    build = commands.add_parser("build", help="write a test image in every local form")
    build.add_argument("name", choices=sorted(RECIPES))
    build.add_argument("directory", type=Path)
    options = parser.parse_args()
    if options.command == "demo":
        return run_demo()
    options.directory.mkdir(parents=True, exist_ok=True)
    image = get_image(options.name, options.directory)
    tag = f"hydria/{options.name}:latest"
    write_oci_layout([image], options.directory / "oci", "latest", options.directory)
    write_oci_archive([image], options.directory / "oci-archive.tar", "latest", options.directory)
    write_docker_archive(image, options.directory / "docker-archive.tar", tag, options.directory)
    print(options.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
