"""What an image has in /var/run and /var/lock, kept on the tmpfs a start mounts there
(runtime/run_folders.py), on plain directories: the tmpfs is an emptied folder here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hydria.runtime import run_folders


def test_the_images_folders_links_and_small_files_are_made_again(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var").mkdir(parents=True)
    (root / "var/run").symlink_to("../run")  # as Debian's: the mount lands on /run
    (root / "run/sshd").mkdir(parents=True)
    (root / "run/sshd").chmod(0o711)
    (root / "run/app.conf").write_text("kept\n")
    (root / "run/utmp").symlink_to("/nowhere")
    (root / "run/big").write_bytes(b"x" * (run_folders.KEPT_FILE_SIZE + 1))
    os.mkfifo(root / "run/fifo")  # other than plain files and links: left out (a FIFO would hang the start)
    (root / "run/sshd/setuid").write_text("")
    (root / "run/sshd/setuid").chmod(0o4755)
    kept = run_folders.image_contents(str(root))
    shutil.rmtree(root / "run")
    (root / "run").mkdir()  # the new tmpfs
    run_folders.restore(str(root), kept)
    assert sorted(os.listdir(root / "run")) == ["app.conf", "sshd", "utmp"]
    assert (root / "run/sshd").stat().st_mode & 0o7777 == 0o711
    assert (root / "run/sshd/setuid").stat().st_mode & 0o7777 == 0o755  # no set-ID bit
    assert (root / "run/app.conf").read_text() == "kept\n" and os.readlink(root / "run/utmp") == "/nowhere"


def test_a_folder_linked_out_of_the_root_is_read_inside_it(tmp_path: Path) -> None:
    """A hostile image's /var/run linked to a host folder: what is kept is the link's target
    inside the root, never the host's files; and an image's own cannot be more than the bound."""
    host = tmp_path / "host-secrets"
    host.mkdir()
    (host / "token").write_text("the host's\n")
    root = tmp_path / "root"
    (root / "var").mkdir(parents=True)
    (root / "var/run").symlink_to(host)
    (root / "var/lock").mkdir()
    for number in range(run_folders.KEPT_ENTRIES + 10):
        (root / f"var/lock/{number}").mkdir()
    kept = run_folders.image_contents(str(root))
    assert kept["/var/run"] == [] and len(kept["/var/lock"]) == run_folders.KEPT_ENTRIES
