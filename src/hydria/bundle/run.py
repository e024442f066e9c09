"""Inside a bundle: start its extracted root filesystem. The bundle's header script runs
``python3 -m hydria.bundle.run ROOTFS RUNDIR [options] -- [COMMAND [ARG...]]`` (the ``--`` is required) with the package
that the bundle carries in ``ROOTFS/.hydria/lib``.

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
from hydria.cli.start import load_conf, start_with
from hydria.config import load_settings
from hydria.errors import HydriaError
from hydria.runtime.rootfs import Container


def main(argv: list[str]) -> int:
    setup_logging()
    parser = ArgumentParser(prog="bundle")
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("rundir", type=Path)
    parser.add_argument("-c", "--conf")
    parser.add_argument("-e", "--env", action="append", default=[])
    parser.add_argument("-m", "--mount", action="append", default=[])
    parser.add_argument("--rc")
    parser.add_argument("-r", "--root", action="store_true")
    parser.add_argument("-w", "--rw", action="store_true")
    split = argv.index("--") if "--" in argv else len(argv)
    try:
        options = parser.parse_args(argv[:split])
        options.command = argv[split + 1:]
        rootfs = options.rootfs.resolve()
        os.environ.update(HYDRIA_SYSCONF_PATH=f"{rootfs}/.hydria/etc/system",
                          HYDRIA_CONFIG_PATH=f"{rootfs}/.hydria/etc/user",
                          HYDRIA_DATA_PATH=str(rootfs.parent), HYDRIA_RUNTIME_PATH=str(options.rundir.resolve()))
        settings = load_settings()
        conf = None
        if options.conf is not None:
            conf, settings = load_conf(options.conf)
        options.target, options.pid, options.net, options.ipc, options.uts = rootfs.name, False, False, False, False
        start_with(options, settings, conf, container=Container(rootfs.name, None, directory=rootfs))
        return 1  # start_with execs the container or raises
    except HydriaError as e:
        return report(e)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
