"""The root's own edits (hooks/identity.py, hooks/localtime.py), applied as a start applies them
(container/start.py ``_apply_edits``) to plain directories, and the image files a start reads."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from hydria.config import load_settings
from hydria.container.start import _apply_edits
from hydria.hooks import identity, localtime
from hydria.runtime import edits
from hydria.runtime import syscalls as sc
from hydria.runtime.edits import Edits, StartContext
from hydria.runtime.mounts import read_in_root


def context(root: Path, remap_root: bool = False) -> StartContext:
    settings = load_settings({"HOME": str(root.parent), "HYDRIA_SYSCONF_PATH": str(root.parent / "none")})
    settings = settings._replace(remap_root=remap_root)
    return StartContext(str(root), str(root.parent), "/", {}, {}, settings, pwd.getpwuid(os.getuid()))


def apply(changes: Edits, root: Path) -> None:
    _apply_edits(changes, context(root), {}, kept=())


def make_host(tmp_path: Path, link: str) -> Path:
    zone = tmp_path / "host" / "usr/share/zoneinfo/Europe/Paris"
    zone.parent.mkdir(parents=True)
    zone.write_bytes(b"TZif-paris")
    etc = tmp_path / "host" / "etc"
    etc.mkdir()
    (etc / "localtime").symlink_to(link)
    return etc / "localtime"


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/localtime").write_text("the image's own\n")
    return root


def test_the_link_and_its_zone_are_copied(tmp_path: Path) -> None:
    host = make_host(tmp_path, "../usr/share/zoneinfo/Europe/Paris")
    root = make_root(tmp_path)
    apply(localtime.edits(context(root), str(host)), root)
    assert os.readlink(root / "etc/localtime") == "../usr/share/zoneinfo/Europe/Paris"
    assert (root / "etc/localtime").read_bytes() == b"TZif-paris"  # resolves inside the root


def test_nothing_happens_without_a_host_link(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    plain = tmp_path / "localtime"
    plain.write_text("a regular file\n")
    for host in (plain, tmp_path / "missing"):
        assert localtime.edits(context(root), str(host)) == Edits()


def apply_to_a_read_only_root(changes: Edits, root: Path) -> None:
    """Apply ``changes`` in a child that sees ``root`` read-only: a read-only bind mount in a mount
    namespace of its own where it can make one (root), else a mode that forbids writes."""
    child = os.fork()
    if child == 0:
        try:  # the child ends here: 0 when the edits applied, 1 when they raised
            if os.getuid() == 0:
                sc.unshare(sc.CLONE_NEWNS)
                sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
                sc.mount(str(root), str(root), None, sc.MS_BIND | sc.MS_REC)
                sc.mount(None, str(root), None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY)
            else:
                os.chmod(root / "etc", 0o555)
            apply(changes, root)
            os._exit(0)
        finally:
            os._exit(1)
    assert os.waitpid(child, 0)[1] == 0  # applied without an error
    os.chmod(root / "etc", 0o755)


def test_a_root_that_cannot_take_them_keeps_its_own(tmp_path: Path) -> None:
    host = make_host(tmp_path, "../usr/share/zoneinfo/Europe/Paris")
    root = make_root(tmp_path)
    (root / "etc/passwd").write_text("image:x:5:5::/:/bin/sh\n")
    apply_to_a_read_only_root(edits.combined([localtime.edits(context(root), str(host)),
                                              identity.edits(context(root))]), root)
    assert (root / "etc/localtime").read_text() == "the image's own\n"
    assert (root / "etc/passwd").read_text() == "image:x:5:5::/:/bin/sh\n"
    assert not (root / "usr").exists()


def test_the_callers_entries_come_first_and_replace_the_images_of_the_same_name_or_id(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    me = pwd.getpwuid(os.getuid())
    (root / "etc/passwd").write_text(f"{me.pw_name}:x:4242:4242::/old:/bin/false\nother:x:{me.pw_uid}:1::/:/bin/sh\n"
                                     "daemon:x:1:1::/:/bin/sh\n")
    apply(identity.edits(context(root)), root)
    lines = (root / "etc/passwd").read_text().splitlines()
    assert lines[0].startswith("root:x:0:0:") and lines[1].startswith(f"{me.pw_name}:x:{me.pw_uid}:")
    assert lines[2:] == ["daemon:x:1:1::/:/bin/sh"]
    assert (root / "etc/group").read_text().startswith("root:x:0:\n")


def test_files_that_link_out_of_the_root_are_written_inside_it(tmp_path: Path) -> None:
    """A hostile image's /etc/passwd, group and localtime's zone, linked to files of the host:
    the host's files are neither read nor written; the links' targets inside the root are."""
    victims = {name: tmp_path / f"victim-{name}" for name in ("passwd", "group", "zone")}
    for name, victim in victims.items():
        victim.write_text(f"host's own {name}:x:7:\n")
    root = make_root(tmp_path)
    (root / "etc/passwd").symlink_to(victims["passwd"])
    (root / "etc/group").symlink_to(f"../../{victims['group'].name}")  # climbs no higher than the root
    (root / "usr/share").mkdir(parents=True)
    (root / "usr/share/zoneinfo").symlink_to(victims["zone"].parent)
    host = make_host(tmp_path, "../usr/share/zoneinfo/Europe/Paris")
    apply(identity.edits(context(root)), root)
    apply(localtime.edits(context(root), str(host)), root)
    assert {name: victim.read_text() for name, victim in victims.items()} == {
        name: f"host's own {name}:x:7:\n" for name in victims}
    inside = root / str(victims["passwd"]).lstrip("/")
    assert inside.read_text().startswith("root:x:0:0:") and "host's own" not in inside.read_text()
    assert (root / victims["group"].name).read_text().startswith("root:x:0:")
    assert (root / str(victims["zone"].parent).lstrip("/") / "Europe/Paris").read_bytes() == b"TZif-paris"


def test_apt_fetches_as_root_under_root_remapping_on_debian_images(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "etc/debian_version").write_text("12.0\n")
    assert not any(f.path.startswith("/etc/apt") for f in identity.edits(context(root)).files)
    _apply_edits(identity.edits(context(root, remap_root=True)), context(root), {}, kept=())
    assert (root / "etc/apt/apt.conf.d/hydria").read_text() == 'APT::Sandbox::User "root";\n'


def test_the_image_files_a_start_reads_are_the_roots_plain_files(tmp_path: Path) -> None:
    """/etc/environment, /etc/fstab and /etc/rc of an image file made by hand: a link to a host file
    reads the root's file of that path (or nothing), never the host's; a FIFO reads nothing (it
    would hang the start)."""
    host_file = tmp_path / "credentials"
    host_file.write_text("TOKEN=host-secret\n")
    root = make_root(tmp_path)
    (root / "etc/environment").symlink_to(host_file)
    os.mkfifo(root / "etc/fstab")
    (root / "etc/rc").symlink_to("../../../etc/rc.real")
    (root / "etc/rc.real").write_text("exec \"$@\"\n")
    assert read_in_root(str(root), "/etc/environment") == ""
    (root / str(host_file).lstrip("/")).parent.mkdir(parents=True)
    (root / str(host_file).lstrip("/")).write_text("TOKEN=the-image's\n")
    assert read_in_root(str(root), "/etc/environment") == "TOKEN=the-image's\n"
    assert read_in_root(str(root), "/etc/fstab") == ""
    assert read_in_root(str(root), "/etc/rc") == 'exec "$@"\n'


def test_the_images_entries_keep_their_bytes_utf8_or_not(tmp_path: Path) -> None:
    """An image's passwd whose comment field is Latin-1: its lines stay, byte for byte (they were
    dropped, and before that the start failed on them)."""
    root = make_root(tmp_path)
    latin = b"daemon:x:1:1:D\xe9mon:/:/bin/sh\n"
    (root / "etc/passwd").write_bytes(b"root:x:0:0:old:/root:/bin/sh\n" + latin)
    apply(identity.edits(context(root)), root)
    written = (root / "etc/passwd").read_bytes()
    assert written.startswith(b"root:x:0:0:root:/root:") and written.endswith(latin) and b":old:" not in written


def test_a_build_reads_the_images_accounts_only_from_plain_files(tmp_path: Path) -> None:
    """COPY --chown's lookup: a FIFO at /etc/passwd names no user (it hung the build); a link out of
    the root reads the root's file of that path."""
    from hydria.imagebuild.copying import CopyError, home_of, owner_of

    root = make_root(tmp_path)
    os.mkfifo(root / "etc/passwd")
    assert home_of(str(root), "app") is None
    with pytest.raises(CopyError, match="the image has no user 'app'"):
        owner_of(str(root), "app")
    host = tmp_path / "host-passwd"
    host.write_text("app:x:5:5::/host-home:/bin/sh\n")
    (root / "etc/passwd").unlink()
    (root / "etc/passwd").symlink_to(host)
    assert home_of(str(root), "app") is None
    inside = root / str(host).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text("app:x:7:8::/home/app:/bin/sh\n")
    assert (home_of(str(root), "app"), owner_of(str(root), "app")) == ("/home/app", (7, 8))


def test_a_missing_home_is_made_from_the_skeleton_as_enroot_makes_it(tmp_path: Path) -> None:
    """enroot's 10-shadow: the caller's home, where the image lacks it, with /etc/skel's plain
    files and login.defs' UMASK; an image's own home, CREATE_HOME no, or a home bound from the
    host (HYDRIA_MOUNT_HOME) are left as they are."""
    root = make_root(tmp_path)
    (root / "etc/login.defs").write_text("# the image's\nUMASK\t\t027\n")
    (root / "etc/skel").mkdir()
    (root / "etc/skel/.profile").write_text("export FROM_SKEL=1\n")
    (root / "etc/skel/.cache").mkdir()  # folders are left out
    os.mkfifo(root / "etc/skel/.fifo")  # as are other than plain files (a FIFO would hang the start)
    (root / "etc/skel/.large").write_bytes(b"x" * (identity.SKELETON_FILE_SIZE + 1))
    (root / "etc/skel/.bashrc").write_bytes(b"alias x='\xff'\n")  # not UTF-8: copied as it is
    home = root / pwd.getpwuid(os.getuid()).pw_dir.lstrip("/")
    umask = os.umask(0o077)  # the caller's umask leaves the mode login.defs gives
    try:
        apply(identity.edits(context(root)), root)
    finally:
        os.umask(umask)
    assert sorted(os.listdir(home)) == [".bashrc", ".profile"]
    assert (home / ".profile").read_text() == "export FROM_SKEL=1\n"
    assert (home / ".bashrc").read_bytes() == b"alias x='\xff'\n"
    assert home.stat().st_mode & 0o777 == 0o750
    (home / ".profile").write_text("the user's own\n")
    apply(identity.edits(context(root)), root)  # a home that is there is kept
    assert (home / ".profile").read_text() == "the user's own\n"

    for login_defs, mount_home in (("CREATE_HOME no\n", False), ("", True)):
        other = tmp_path / f"other-{mount_home}"
        (other / "etc").mkdir(parents=True)
        (other / "etc/login.defs").write_text(login_defs)
        bound = context(other)
        bound = bound._replace(settings=bound.settings._replace(mount_home=mount_home))
        _apply_edits(identity.edits(bound), bound, {}, kept=())
        assert not (other / pwd.getpwuid(os.getuid()).pw_dir.lstrip("/")).exists()


def test_a_skeleton_linked_out_of_the_root_is_read_inside_it(tmp_path: Path) -> None:
    """A hostile image's /etc/skel (or useradd's SKEL) linked to a host folder: the new home gets
    what the link's target inside the root holds, never the host's files."""
    host_folder = tmp_path / "host-secrets"
    host_folder.mkdir()
    (host_folder / "id_rsa").write_text("the host's key\n")
    home_in = pwd.getpwuid(os.getuid()).pw_dir.lstrip("/")
    for skeleton in ("link", "useradd"):
        root = make_root(tmp_path / skeleton)
        if skeleton == "link":
            (root / "etc/skel").symlink_to(host_folder)
        else:
            (root / "etc/default").mkdir()
            (root / "etc/default/useradd").write_text(f"SKEL=../../../..{host_folder}\n")
        apply(identity.edits(context(root)), root)
        assert (root / home_in).is_dir() and os.listdir(root / home_in) == []


def test_an_image_without_path_gets_enroots_path(tmp_path: Path) -> None:
    """enroot's login emulation: login.defs' ENV_SUPATH, else the standard path with the sbin
    folders, for every user; an image's own PATH is kept."""
    root = make_root(tmp_path)
    user = pwd.getpwuid(os.getuid())
    environment: dict[str, str] = {}
    identity.login_environment(environment, str(root), 1000, user)
    assert environment["PATH"] == identity.STANDARD_PATH
    (root / "etc/login.defs").write_text("ENV_SUPATH\tPATH=/site/sbin:/usr/bin # the site's\nENV_PATH\tPATH=/usr/bin\n")
    environment = {}
    identity.login_environment(environment, str(root), 1000, user)
    assert environment["PATH"] == "/site/sbin:/usr/bin"
    environment = {"PATH": "/image/bin"}
    identity.login_environment(environment, str(root), 1000, user)
    assert environment["PATH"] == "/image/bin"
