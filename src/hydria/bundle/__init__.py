"""Self-extracting bundles (enroot's ``bundle``): one executable file holding an image's root
filesystem and hydria's own runtime, which starts the image on a host without hydria installed.

``build`` writes the file (``hydria bundle``); ``header.sh`` is the script at its head, which
checks, extracts and hands over to cli/bundle_run.py (``python3 -m hydria.cli.bundle_run``) inside the extracted
tree. The format is described in docs/bundle.md.
"""
