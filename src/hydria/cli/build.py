"""``hydria build [-f DOCKERFILE] [-t NAME] [-o IMAGE.sqsh] [--oci DIR] [--build-arg K=V]...
[--target STAGE] [--platform P] [--no-cache] [--secret id=ID,src=FILE]... [-v HOST:CONTAINER]...
CONTEXT``: build an image from a Dockerfile, as an
ordinary user, without a daemon (docs/build.md)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from hydria.config import Settings
from hydria.errors import HydriaError, InvalidArgument, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--file", dest="dockerfile", metavar="DOCKERFILE",
                        help="the Dockerfile (default: CONTEXT/Dockerfile)")
    parser.add_argument("-t", "--tag", metavar="NAME[:TAG]",
                        help="name the image; the image file is NAME+TAG.sqsh unless -o names another "
                             "(a layered image unless HYDRIA_LAYERED_IMAGES=n)")
    parser.add_argument("-o", "--output", metavar="IMAGE.sqsh",
                        help="write the image as this squashfs file (always one self-contained file)")
    parser.add_argument("--oci", metavar="DIR", help="write the image as an OCI image layout in DIR")
    parser.add_argument("--push", metavar="URI", help="push the image to docker://[USER@][REGISTRY#]REPOSITORY[:TAG]")
    parser.add_argument("--build-arg", dest="build_args", action="append", default=[], metavar="KEY[=VALUE]",
                        help="a value for an ARG of the Dockerfile (a bare KEY takes yours from the environment)")
    parser.add_argument("--target", metavar="STAGE", help="build this stage (default: the last)")
    parser.add_argument("--platform", metavar="PLATFORM", help="the platform of the base images (default: this machine's)")
    parser.add_argument("--no-cache", action="store_true", help="run every step, whatever the build cache holds")
    parser.add_argument("--secret", dest="secrets", action="append", default=[], metavar="id=ID,src=FILE",
                        help="a secret that RUN --mount=type=secret,id=ID reads (or id=ID,env=VARIABLE); never "
                             "in the image nor in the build cache")
    parser.add_argument("-v", "--volume", dest="volumes", action="append", default=[], metavar="HOST:CONTAINER[:ro]",
                        help="a host folder or file that every RUN sees (writable unless :ro); not in the image, "
                             "nor in the cache keys: --no-cache when it changes what a step makes")
    parser.add_argument("context", metavar="CONTEXT", help="the build context: the folder COPY and ADD read from")


def build_args(items: list[str]) -> dict[str, str]:
    """``--build-arg KEY=VALUE``, or ``KEY`` for the caller's own value (left out where unset, as Docker)."""
    values = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not name:
            raise UsageError(f"--build-arg {item}: no name", hint="--build-arg KEY=VALUE")
        if equals:
            values[name] = value
        elif name in os.environ:
            values[name] = os.environ[name]
    return values


def _outputs(options: argparse.Namespace) -> tuple[Path | None, Path | None, str]:
    """The image file, the OCI layout and the tag its manifest gets there."""
    from hydria.image.ref.reference import RegistryImage, parse

    tag = "latest"
    image_file = Path(options.output) if options.output else None
    if options.tag:
        try:
            ref = parse(f"docker://{options.tag}")
        except HydriaError:
            raise InvalidArgument(f"-t {options.tag}", hint="a name such as myapp or myapp:1.0") from None
        assert isinstance(ref, RegistryImage)
        tag = ref.tag or "latest"
        if image_file is None:
            image_file = Path(ref.default_output())
    oci = Path(options.oci) if options.oci else None
    if image_file is None and oci is None and not options.push:
        raise UsageError("say where the image goes: -t NAME, -o IMAGE.sqsh, --oci DIR or --push URI",
                         hint="e.g. hydria build -t myapp .")
    if image_file is not None:
        from hydria.paths import check_output_folder

        image_file = Path(os.path.abspath(image_file))
        check_output_folder(image_file)
    return image_file, oci, tag


def run(options: argparse.Namespace, settings: Settings) -> int:
    from hydria.imagebuild import host_inputs, output
    from hydria.imagebuild.builder import BuildOptions, build
    from hydria.log import Logger
    from hydria.runtime.layered import LAYER_FOLDER

    log = Logger("hydria")
    image_file, oci, tag = _outputs(options)
    destination = None
    if options.push:
        from hydria.cli.push import destination_of

        destination = destination_of(options.push)
    args = build_args(options.build_args)
    host = host_inputs.HostInputs(host_inputs.secrets(options.secrets, os.environ), host_inputs.volumes(options.volumes),
                      host_inputs.ca_bundle(settings.build_ca_bundle), host_inputs.proxies(os.environ, args))
    request = BuildOptions(options.context, options.dockerfile, args, options.target, options.platform,
                           options.no_cache, host)
    with ExitStack() as stack:
        started = time.monotonic()
        built = build(request, settings, stack, show=lambda line: print(line, file=sys.stderr, flush=True))
        log.info("Built in %.2f s", time.monotonic() - started)
        cache = built.cache
        if oci is not None:
            digest = output.write_oci_layout(built.image, cache, oci, tag)
            log.info("Wrote the OCI image layout %s (%s)", oci, digest)
        if options.tag:
            output.record_name(built.image, cache, options.tag)
        if image_file is not None:
            if not options.output and output.write_layered(built.image, cache, image_file, built.uri, settings):
                log.info("Wrote %s, a layered image (its layer images are in %s beside it)", image_file, LAYER_FOLDER)
            else:
                output.write_squashfs(built.image, cache, image_file, built.uri, settings)
                log.info("Wrote %s", image_file)
        if destination is not None:
            from hydria.cli.push import push_to

            record = output.build_record(built.image, options.tag or destination.uri)
            push_to(output.push_image(record, cache, settings, destination.registry), destination, settings)
    return 0
