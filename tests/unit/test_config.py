"""Settings: file syntax, precedence (default < system < conf.d < user < environment), expansion,
and errors that name the file, line and setting."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from hydria import config, log
from hydria.config import (
    SPECS,
    Context,
    Settings,
    load_settings,
    only_root_can_write,
    parse_conf,
    resolve,
)
from hydria.errors import ConfigError, HydriaError

CONTEXT = Context(uid=1001, user="ada", home="/home/ada", hostname="node07", nproc=4,
                  package_dir="/opt/hydria", runtime_default="/run/user/1001/hydria")
ENV = {"HOME": "/home/ada"}


def settings_from(text: str, env: dict[str, str] | None = None):
    return resolve([parse_conf(text, "/etc/hydria/hydria.conf")], env or ENV, CONTEXT)


def test_defaults_follow_enroot_with_hydria_names() -> None:
    s = resolve([], ENV, CONTEXT)
    assert s.data_path == "/home/ada/.local/share/hydria"
    assert s.cache_path == "/home/ada/.cache/hydria"
    assert s.config_path == "/home/ada/.config/hydria"
    assert s.runtime_path == "/run/user/1001/hydria"
    assert s.sysconf_path == "/etc/hydria"
    assert s.temp_path == "/tmp"
    assert s.max_processors == 4 and s.max_connections == 10
    assert s.connect_timeout == 30 and s.transfer_timeout == 0 and s.transfer_retries == 0
    assert s.native_overlayfs and not s.login_shell  # login shell: docs/runtime.md says why not
    assert not (s.remap_root or s.rootfs_writable or s.mount_home or s.allow_http or s.unpack)
    assert s.origins["HYDRIA_DATA_PATH"] == "default"


def test_every_reference_setting_exists() -> None:
    names = {spec.name for spec in SPECS}
    enroot = {"LIBRARY_PATH", "SYSCONF_PATH", "RUNTIME_PATH", "CONFIG_PATH", "CACHE_PATH", "DATA_PATH",
              "TEMP_PATH", "GZIP_PROGRAM", "ZSTD_OPTIONS", "SQUASH_OPTIONS", "MAX_PROCESSORS",
              "MAX_CONNECTIONS", "CONNECT_TIMEOUT", "TRANSFER_TIMEOUT", "TRANSFER_RETRIES",
              "LOGIN_SHELL", "ALLOW_SUPERUSER", "ALLOW_HTTP", "ROOTFS_WRITABLE", "NATIVE_OVERLAYFS",
              "REMAP_ROOT", "UNSHARE_NET", "UNSHARE_PID", "UNSHARE_IPC", "UNSHARE_UTS", "BUNDLE_ALL",
              "BUNDLE_CHECKSUM", "FORCE_OVERRIDE", "MOUNT_HOME", "RESTRICT_DEV"}
    assert enroot <= names


def test_the_settings_record_and_the_table_of_settings_agree() -> None:
    """Settings is written out for type checkers; the table (SPECS) is what files and variables
    are parsed by: the same settings, in the same order, each typed as its kind parses."""
    python_type = {"path": "str", "str": "str", "bool": "bool", "int": "int", "size": "int"}
    fields = [name for name in Settings._fields if name not in ("environment", "origins")]
    assert fields == [spec.name.lower() for spec in SPECS]
    assert {spec.name: Settings.__annotations__[spec.name.lower()] for spec in SPECS} == \
        {spec.name: python_type[spec.kind] for spec in SPECS}


def test_runtime_default_without_a_login_session_is_per_user_under_tmpdir() -> None:
    context = CONTEXT._replace(runtime_default="${TMPDIR:-/tmp}/hydria-runtime-${UID}")
    assert resolve([], ENV, context).runtime_path == "/tmp/hydria-runtime-1001"
    assert resolve([], {**ENV, "TMPDIR": "/scratch"}, context).runtime_path == "/scratch/hydria-runtime-1001"


def test_xdg_variables_move_the_defaults() -> None:
    s = resolve([], {**ENV, "XDG_DATA_HOME": "/scratch/ada", "XDG_RUNTIME_DIR": "/run/user/1001"},
                CONTEXT)
    assert s.data_path == "/scratch/ada/hydria"


@pytest.mark.parametrize("line", [
    "HYDRIA_DATA_PATH /scratch/$USER/containers",
    "HYDRIA_DATA_PATH=/scratch/$USER/containers",
    "HYDRIA_DATA_PATH = /scratch/${USER}/containers",
    '  HYDRIA_DATA_PATH "/scratch/${USER}/containers"',
    "HYDRIA_DATA_PATH /scratch/ada/containers   # per-user",
    "ENROOT_DATA_PATH /scratch/$USER/containers",
])
def test_line_forms(line: str) -> None:
    s = settings_from(line)
    assert s.data_path == "/scratch/ada/containers"
    assert s.origins["HYDRIA_DATA_PATH"] == "/etc/hydria/hydria.conf:1"


def test_single_quotes_are_literal() -> None:
    assert settings_from("HYDRIA_SQUASH_OPTIONS '-comp $X'").squash_options == "-comp $X"


def test_expansion_of_identity_and_tmpdir() -> None:
    s = settings_from("HYDRIA_CACHE_PATH ${TMPDIR:-/tmp}/hydria-$UID-$HOSTNAME\n"
                      "HYDRIA_RUNTIME_PATH /run/hydria/${XDG_CACHE_HOME}")
    assert s.cache_path == "/tmp/hydria-1001-node07"
    assert s.runtime_path == "/run/hydria/home/ada/.cache"


def test_host_name_and_uid_are_the_processes_not_the_environments() -> None:
    """Slurm sets HOSTNAME to the batch host for every task of a job: a per-node path must not follow it."""
    s = settings_from("HYDRIA_DATA_PATH /local/$HOSTNAME/$UID", {**ENV, "HOSTNAME": "batchhost", "UID": "0"})
    assert s.data_path == "/local/node07/1001"


def test_a_shell_export_line_says_how_to_write_it() -> None:
    with pytest.raises(ConfigError) as failed:
        parse_conf("export HYDRIA_DATA_PATH=/scratch/$USER\n", "hydria.conf")
    assert failed.value.message == "Invalid configuration file: hydria.conf:1: " \
        "'export HYDRIA_DATA_PATH=/scratch/$USER' is a shell command"
    assert failed.value.hint is not None
    assert failed.value.hint.startswith("write HYDRIA_DATA_PATH=/scratch/$USER without")


def test_comments_and_blank_lines_are_skipped() -> None:
    s = settings_from("# a comment\n\n#HYDRIA_MAX_CONNECTIONS 3\nHYDRIA_MAX_CONNECTIONS 4\n")
    assert s.max_connections == 4


def test_passthrough_variables_reach_the_environment() -> None:
    s = settings_from("NVIDIA_DRIVER_CAPABILITIES compute,utility\nhttps_proxy http://proxy:3128")
    assert s.environment == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                             "https_proxy": "http://proxy:3128"}


def test_precedence_layers_then_environment() -> None:
    system = parse_conf("HYDRIA_MAX_CONNECTIONS 1\nHYDRIA_CONNECT_TIMEOUT 5\nHYDRIA_TRANSFER_RETRIES 7",
                        "system")
    dropin = parse_conf("HYDRIA_MAX_CONNECTIONS 2\nHYDRIA_CONNECT_TIMEOUT 6", "dropin")
    user = parse_conf("HYDRIA_MAX_CONNECTIONS 3", "user")
    s = resolve([system, dropin, user], {**ENV, "HYDRIA_CONNECT_TIMEOUT": "9"}, CONTEXT)
    assert (s.max_connections, s.connect_timeout, s.transfer_retries) == (3, 9, 7)
    assert s.origins["HYDRIA_CONNECT_TIMEOUT"] == "environment variable HYDRIA_CONNECT_TIMEOUT"


def test_enroot_environment_names_below_hydrias_paths_included() -> None:
    """A site's module file exports ENROOT_DATA_PATH and friends: they move hydria's paths too,
    and a HYDRIA_* variable still wins."""
    s = settings_from("HYDRIA_MAX_CONNECTIONS 4", {**ENV, "ENROOT_MAX_CONNECTIONS": "6", "ENROOT_REMAP_ROOT": "y",
                                                   "ENROOT_MOUNT_HOME": "y", "HYDRIA_MOUNT_HOME": "n",
                                                   "ENROOT_DATA_PATH": "/enroot/data",
                                                   "ENROOT_CACHE_PATH": "/enroot/cache",
                                                   "HYDRIA_CACHE_PATH": "/hydria/cache"})
    assert (s.max_connections, s.remap_root, s.mount_home) == (6, True, False)
    assert s.origins["HYDRIA_REMAP_ROOT"] == "environment variable ENROOT_REMAP_ROOT"
    assert (s.data_path, s.cache_path) == ("/enroot/data", "/hydria/cache")
    assert s.origins["HYDRIA_DATA_PATH"] == "environment variable ENROOT_DATA_PATH"


def test_empty_environment_variable_does_not_override() -> None:
    s = settings_from("HYDRIA_MAX_CONNECTIONS 4", {**ENV, "HYDRIA_MAX_CONNECTIONS": ""})
    assert s.max_connections == 4


@pytest.mark.parametrize(("value", "expected"), [
    ("y", True), ("YES", True), ("true", True), ("on", True), ("1", True),
    ("n", False), ("No", False), ("FALSE", False), ("off", False), ("0", False),
])
def test_booleans(value: str, expected: bool) -> None:
    assert settings_from(f"HYDRIA_REMAP_ROOT {value}").remap_root is expected
    assert resolve([], {**ENV, "HYDRIA_REMAP_ROOT": value}, CONTEXT).remap_root is expected


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False), ("f", False), ("t", True)])
def test_a_boolean_under_enroots_name_that_enroot_reads_otherwise_is_named_once(
        value: str, expected: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_warned", set())  # a fresh process's
    monkeypatch.setattr(log, "_stderr_level", None)  # through logging, whatever an earlier test set
    settings = settings_from(f"ENROOT_MOUNT_HOME {value}\nHYDRIA_REMAP_ROOT 0")
    assert settings.mount_home is expected and settings.remap_root is False
    again = resolve([], {**ENV, "ENROOT_MOUNT_HOME": value}, CONTEXT)
    settings_from(f"ENROOT_MOUNT_HOME {value}")  # read again in the same process: said once
    assert again.mount_home is expected
    warned = "\n".join(record.getMessage() for record in caplog.records)
    if value in ("0", "off"):  # true to enroot (every value but n, no, f, false)
        assert warned.count("hydria.conf:1: ENROOT_MOUNT_HOME: ") == 1, warned
        assert warned.count("environment variable ENROOT_MOUNT_HOME: ") == 1, warned
        assert "true to enroot" in warned and "write n or y" in warned
    else:
        assert warned == ""


@pytest.mark.parametrize(("text", "fragments"), [
    ("HYDRIA_MAX_CONNECTIONS ten", ["hydria.conf:1", "HYDRIA_MAX_CONNECTIONS", "'ten'", "integer"]),
    ("\nHYDRIA_MAX_CONNECTIONS -3", ["hydria.conf:2", "integer"]),
    ("HYDRIA_REMAP_ROOT maybe", ["hydria.conf:1", "HYDRIA_REMAP_ROOT", "boolean"]),
    ("HYDRIA_DATA_PATH relative/dir", ["hydria.conf:1", "HYDRIA_DATA_PATH", "absolute path"]),
    ("HYDRIA_DATA_PATH /x/$SLURM_JOB_ID", ["hydria.conf:1", "HYDRIA_DATA_PATH", "SLURM_JOB_ID"]),
    ("HYDRIA_CACHE_PATH /tmp/$(id -u)", ["hydria.conf:1", "command substitution"]),
    ("HYDRIA_DATAPATH /x", ["hydria.conf:1", "unknown setting HYDRIA_DATAPATH"]),
    ("ENROOT_NOPE y", ["hydria.conf:1", "unknown setting ENROOT_NOPE"]),
    ("PATH /usr/bin", ["hydria.conf:1", "PATH is not a hydria setting"]),
    ("= /no/key", ["hydria.conf:1", "expected"]),
    ("just words here", ["hydria.conf:1", "just is not a hydria setting"]),
    ('HYDRIA_DATA_PATH "/x', ["hydria.conf:1", "unbalanced quotes"]),
])
def test_bad_values_name_file_line_and_setting(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(text)
    for fragment in fragments:
        assert fragment in caught.value.message


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable HYDRIA_CONNECT_TIMEOUT.*integer"):
        resolve([], {**ENV, "HYDRIA_CONNECT_TIMEOUT": "soon"}, CONTEXT)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_reads_system_dropins_in_order_then_user_file(tmp_path: Path) -> None:
    sysconf = tmp_path / "etc"
    write(sysconf / "hydria.conf", f"HYDRIA_CONFIG_PATH {tmp_path}/user\nHYDRIA_MAX_CONNECTIONS 1\n")
    write(sysconf / "hydria.conf.d" / "20-b.conf", "HYDRIA_MAX_CONNECTIONS 3\nHYDRIA_TRANSFER_RETRIES 2\n")
    write(sysconf / "hydria.conf.d" / "10-a.conf", "HYDRIA_MAX_CONNECTIONS 2\n")
    write(sysconf / "hydria.conf.d" / "30-ignored.txt", "not a conf file\n")
    write(tmp_path / "user" / "hydria.conf", "HYDRIA_TRANSFER_RETRIES 5\n")
    s = load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(sysconf)})
    assert s.max_connections == 3
    assert s.transfer_retries == 5
    assert s.origins["HYDRIA_TRANSFER_RETRIES"] == f"{tmp_path}/user/hydria.conf:1"


def test_load_without_any_file_gives_defaults(tmp_path: Path) -> None:
    s = load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path / "none")})
    assert s.cache_path == str(tmp_path / ".cache" / "hydria")


def test_load_reports_the_broken_dropin(tmp_path: Path) -> None:
    write(tmp_path / "hydria.conf.d" / "50-site.conf", "\n\nHYDRIA_UNPACK sometimes\n")
    with pytest.raises(ConfigError, match=r"50-site.conf:3: HYDRIA_UNPACK: 'sometimes' is not a boolean"):
        load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path)})


@pytest.mark.parametrize(("written", "hint"), [
    ("HYDRIA_DATAPATH /x", "did you mean HYDRIA_DATA_PATH?"),
    ("ENROOT_CACHE_PTH /x", "did you mean ENROOT_CACHE_PATH?"),
    ("HYDRIA_QUITE_DIFFERENT y", "hydria info lists the settings"),
])
def test_a_misspelled_setting_is_named_with_the_one_meant(written: str, hint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(written)
    assert hint in (caught.value.hint or "")


def test_what_is_wrong_can_be_collected_and_the_rest_read(tmp_path: Path) -> None:
    """``hydria info`` reads a broken configuration whole: each problem said, the rest in effect."""
    write(tmp_path / "hydria.conf", "HYDRIA_DATAPATH /x\nHYDRIA_MAX_CONNECTIONS 3\nHYDRIA_UNPACK sometimes\n"
                                    "HYDRIA_TRANSFER_RETRIES 5\n")
    problems: list[ConfigError] = []
    s = load_settings({"HOME": str(tmp_path), "HYDRIA_SYSCONF_PATH": str(tmp_path)}, problems=problems)
    assert [p.message.split(": ", 2)[1] for p in problems] == [f"{tmp_path}/hydria.conf:1", f"{tmp_path}/hydria.conf:3"]
    assert (s.max_connections, s.transfer_retries, s.unpack) == (3, 5, False)
    assert s.origins["HYDRIA_UNPACK"] == "default"


def test_load_reads_enroot_conf_first_where_sysconf_is_enroots_folder(tmp_path: Path) -> None:
    """ENROOT_SYSCONF_PATH=/etc/enroot (a module file) reads enroot.conf, its drop-ins, then hydria.conf."""
    write(tmp_path / "enroot.conf", "ENROOT_MAX_CONNECTIONS 1\nENROOT_TRANSFER_RETRIES 4\n")
    write(tmp_path / "enroot.conf.d" / "10-site.conf", "ENROOT_MAX_CONNECTIONS 2\nENROOT_CONNECT_TIMEOUT 7\n")
    write(tmp_path / "hydria.conf", "HYDRIA_TRANSFER_RETRIES 5\n")
    s = load_settings({"HOME": str(tmp_path), "ENROOT_SYSCONF_PATH": str(tmp_path)})
    assert (s.sysconf_path, s.max_connections, s.connect_timeout, s.transfer_retries) == (str(tmp_path), 2, 7, 5)


def test_command_substitution_runs_only_where_the_file_allows_it() -> None:
    system = parse_conf("ENROOT_MAX_PROCESSORS $(echo 3)\nENROOT_DATA_PATH /data/$(printf '%s' \"$USER\")-$(id -u)\n",
                        "/etc/hydria/enroot.conf", commands=True)
    s = resolve([system], ENV, CONTEXT)
    assert (s.max_processors, s.data_path) == (3, f"/data/ada-{os.getuid()}")
    with pytest.raises(ConfigError, match=r"user.conf:1: HYDRIA_MAX_PROCESSORS: command substitution .* only root"):
        resolve([parse_conf("ENROOT_MAX_PROCESSORS $(nproc)", "user.conf")], ENV, CONTEXT)


@pytest.mark.parametrize(("value", "message"), [
    ("$(exit 3)", r"\$\(exit 3\) failed: exit status 3"),
    ("$(echo oops >&2; false)", r".* failed: oops"),
    ("$(echo 3", r"unbalanced \$\("),
])
def test_a_failing_command_substitution_is_an_error_naming_the_line(value: str, message: str) -> None:
    system = parse_conf(f"ENROOT_MAX_PROCESSORS {value}", "/etc/hydria/hydria.conf", commands=True)
    with pytest.raises(ConfigError, match="hydria.conf:1: HYDRIA_MAX_PROCESSORS: " + message):
        resolve([system], ENV, CONTEXT)


@pytest.mark.parametrize(("layout", "expected"), [
    ("root's file in root's folder", True),
    ("root's file in root's folder under sticky /tmp", True),  # only root may rename what /tmp holds of root's
    ("file others may write", False),
    ("folder others may write", False),
    ("folder others may write, sticky, not root's", False),
    ("file of a user", False),
    ("folder of a user", False),
    ("link to /etc/passwd", True),  # judged by what it leads to
])
def test_only_root_can_write(layout: str, expected: bool) -> None:
    """The configuration and the image store follow one rule (hydria.paths.writable_by_others)."""
    from hydria.image.kept.store import ImageStore

    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        folder.chmod(0o755)
        target = write(folder / "hydria.conf", "")
        if layout == "file others may write":
            target.chmod(0o666)
        elif layout == "folder others may write":
            folder.chmod(0o777)
        elif layout == "folder others may write, sticky, not root's":
            folder.chmod(0o1777)
            os.chown(folder, 1001, 1001)
        elif layout == "file of a user":
            os.chown(target, 1001, 1001)
        elif layout == "folder of a user":
            os.chown(folder, 1001, 1001)
        elif layout == "link to /etc/passwd":
            target.unlink()
            target.symlink_to("/etc/passwd")
        assert only_root_can_write(str(target)) is expected
        store = ImageStore(folder, "root")
        store.images = target  # the store's check of its images folder, on the same path
        try:
            store.check()
        except HydriaError:
            assert not expected
        else:
            assert expected
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_an_enroot_conf_runtime_path_works_without_a_login_session() -> None:
    """enroot.conf's "ENROOT_RUNTIME_PATH ${XDG_RUNTIME_DIR}/enroot", where XDG_RUNTIME_DIR is unset
    (Slurm compute nodes): a per-user folder, not an error and not one all users share."""
    line = "ENROOT_RUNTIME_PATH ${XDG_RUNTIME_DIR}/enroot"
    assert settings_from(line).runtime_path == "/run/user/1001/enroot"
    no_session = CONTEXT._replace(runtime_default="${TMPDIR:-/tmp}/hydria-runtime-${UID}")
    assert resolve([parse_conf(line, "enroot.conf")], ENV, no_session).runtime_path == "/tmp/hydria-runtime-1001/enroot"
    assert settings_from(line, {**ENV, "XDG_RUNTIME_DIR": "/run/user/7"}).runtime_path == "/run/user/7/enroot"


def test_a_command_runs_once_however_often_settings_load(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    system = parse_conf(f"ENROOT_MAX_PROCESSORS $(echo x >> {counter}; echo 2)", "/etc/hydria/hydria.conf",
                        commands=True)
    for _ in range(3):
        assert resolve([system], ENV, CONTEXT).max_processors == 2
    assert counter.read_text() == "x\n"
