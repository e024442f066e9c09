"""``python -m hydria`` runs the command-line interface."""

import sys

from hydria.cli.main import main

sys.exit(main())
