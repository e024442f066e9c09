"""Inside a bundle: start its extracted root filesystem. The bundle's header script runs
``python3 -m hydria.cli.bundle_run ROOTFS RUNDIR [options] -- [COMMAND [ARG...]]`` (the ``--`` is
required) with the package that the bundle carries in ``ROOTFS/.hydria/lib``.

The settings come from the bundle (``.hydria/etc/system``, and ``.hydria/etc/user`` with
``--all``) and from the caller's ``HYDRIA_*`` variables; the data path is the extracted tree and
the runtime path the ``.NAME`` directory beside it, as enroot's bundles do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydria.cli.commands import ArgumentParser
from hydria.cli.logsetup import report, setup_logging
from hydria.config import load_settings
from hydria.container import options as start_options
from hydria.errors import HydriaError
from hydria.runtime.rootfs import Container


def main(argv: list[str]) -> int:
    setup_logging()
    parser = ArgumentParser(prog="bundle")
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("rundir", type=Path)
    start_options.add_arguments(parser, bundle=True)
    split = argv.index("--") if "--" in argv else len(argv)
    try:
        options = parser.parse_args(argv[:split], namespace=start_options.defaults(command=argv[split + 1:]))
        rootfs = options.rootfs.resolve()
        os.environ.update(HYDRIA_SYSCONF_PATH=f"{rootfs}/.hydria/etc/system",
                          HYDRIA_CONFIG_PATH=f"{rootfs}/.hydria/etc/user",
                          HYDRIA_DATA_PATH=str(rootfs.parent), HYDRIA_RUNTIME_PATH=str(options.rundir.resolve()))
        settings = load_settings()
        conf = None
        if options.conf is not None:
            conf, settings = start_options.load_conf(options.conf)
        options.target = rootfs.name
        start_options.start_from(options, settings, conf, container=Container(rootfs.name, None, directory=rootfs))
        return 1  # start_from execs the container or raises
    except HydriaError as e:
        return report(e)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
