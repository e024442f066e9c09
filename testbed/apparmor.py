"""AppArmor 4's profile compiler, for checking hydria's profile on a machine without AppArmor.

Debian 12 ships AppArmor 3, which knows no ``userns`` rule; Debian 13's parser needs Debian 13's
C library. Both packages are fetched from Debian's archive with apt (a list of their own, the
system's sources untouched) and unpacked, not installed, under the test bed's cache; the parser
runs with that C library's loader and compiles without loading (``-Q``) against the ABI 4.0
features file, as on a node without the kernel's AppArmor."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.recipes import DEFAULT_CACHE

SUITE = "trixie"
PACKAGES = ("apparmor", "libc6")
LIBRARIES = "usr/lib/x86_64-linux-gnu"


def parser(cache: Path = DEFAULT_CACHE) -> list[str]:
    """The command that compiles a profile file (its path to be appended) without loading it."""
    root = cache / f"apparmor-{SUITE}"
    if not (root / "usr/sbin/apparmor_parser").exists():
        _fetch(root)
    return [str(root / LIBRARIES / "ld-linux-x86-64.so.2"), "--library-path", str(root / LIBRARIES),
            str(root / "usr/sbin/apparmor_parser"), "-Q", "-K", "--base", str(root / "etc/apparmor.d"),
            "-M", str(root / "etc/apparmor.d/abi/4.0")]


def _fetch(root: Path) -> None:
    work = root.with_name(root.name + ".new")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (work / "lists/partial").mkdir(parents=True)
    (work / "sources.list").write_text(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                       f"http://deb.debian.org/debian {SUITE} main\n")
    apt = ["apt-get", "-q", "-o", f"Dir::Etc::sourcelist={work}/sources.list", "-o", "Dir::Etc::sourceparts=-",
           "-o", f"Dir::State::Lists={work}/lists", "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
           "-o", "APT::Sandbox::User=root"]
    subprocess.run([*apt, "update"], check=True, capture_output=True)
    subprocess.run([*apt, "download", *PACKAGES], check=True, capture_output=True, cwd=work)
    for package in sorted(work.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(package), str(work / "tree")], check=True)
    (work / "tree").rename(root)
    subprocess.run(["rm", "-rf", str(work)], check=True)
