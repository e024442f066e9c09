"""The folders an image's config names (WORKDIR, VOLUMEs) that its layers lack, for a layered
image's top layer (image/kept/layered_import.py): what the merged import adds (image/squash/flatten.py's
``ensure_dirs``), so that a start finds the WORKDIR to change to however read-only its root is.

Which folders the layers have is asked of hydria's reader (``--folders``), which looks a path up
in the layer images as a start's merged tree shows it: a deletion, an opaque folder and a link
on the way count as they would there. A folder is added, mode 0755, only where nothing but
folders is on its way; a folder of a lower layer on its way is stated again in the top layer with
the attributes it has, since the topmost layer's folder gives a merged folder its attributes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from hydria.image.squash.flatten import ExtraFile, clean_path
from hydria.image.squash.layer_image import LayerNeedsMerge
from hydria.runtime.reader import installed_reader

ADDED_MODE = 0o755  # as the merged import adds them
USAGE_STATUS = 2  # the reader's answer to a command line it does not know (one older than --folders)


def missing_folders(layers: Sequence[str], folders: Sequence[str]) -> list[ExtraFile]:
    """The top layer's entries that make ``folders`` (paths in the image) where the layer images
    ``layers`` (the lowest first) lack them: each missing folder, and the folders on its way.

    Raises:
        LayerNeedsMerge: the reader is not installed, or cannot read the layer images (the
            caller merges the image into one file, which adds the folders as it goes).
        UnsafeLayer: a folder's path holds ``..``.
    """
    paths = [path for path in dict.fromkeys(clean_path(folder, "WorkingDir") for folder in folders)
             if path and "\n" not in path]
    if not paths:
        return []
    reader = installed_reader()
    if reader is None:
        raise LayerNeedsMerge("hydria's reader, which finds the WORKDIR and VOLUME folders that the layers lack, "
                              "is not installed (hydria install-reader)")
    answer = subprocess.run([reader, "--folders", *layers], input="".join(f"{path}\n" for path in paths).encode(),
                            capture_output=True, check=False)
    lines = answer.stdout.decode("utf-8", "surrogateescape").splitlines()
    if answer.returncode == USAGE_STATUS:
        raise LayerNeedsMerge(f"the installed reader {reader} was built before it could find the WORKDIR and VOLUME "
                              "folders that the layers lack: hydria install-reader builds it again")
    if answer.returncode != 0 or len(lines) != len(paths):
        why = answer.stderr.decode(errors="replace").strip() or f"exit status {answer.returncode}"
        raise LayerNeedsMerge(f"cannot find which WORKDIR and VOLUME folders the layers lack: {why}")
    entries: dict[str, ExtraFile] = {}
    for path, line in zip(paths, lines):
        for entry in _entries(path.split("/"), line.split(";")):
            entries.setdefault(entry.path, entry)
    return sorted(entries.values(), key=lambda entry: entry.path)


def _entries(parts: list[str], found: list[str]) -> list[ExtraFile]:
    """The entries that make the folder of ``parts`` given what the reader ``found`` at each."""
    if found[-1] != "-":
        return []  # there already, or something other than a folder on its way
    entries = []
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        if depth < len(found):
            mode, uid, gid, mtime = found[depth - 1].split()[1:]
            entries.append(ExtraFile(path, None, int(mode, 8), int(uid), int(gid), int(mtime)))
        else:
            entries.append(ExtraFile(path, None, ADDED_MODE))
    return entries

