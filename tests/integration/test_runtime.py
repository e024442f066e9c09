"""``hydria start``, ``create``, ``list``, ``remove`` as the unprivileged test user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.publish import PublishedImage
from testbed.users import live_processes, run_as
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def start(workspace: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return workspace.run("start", *args, **env)


def output(workspace: Workspace, *args: str, **env: str) -> str:
    result = start(workspace, *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_os_release_is_the_images(images: dict[str, Path], workspace: Workspace) -> None:
    assert 'PRETTY_NAME="hydria busybox test image"' in output(workspace, str(images["busybox"]), "cat", "/etc/os-release")


def test_identity_and_root_remap(images: dict[str, Path], workspace: Workspace) -> None:
    uid = workspace.user.uid
    assert output(workspace, str(images["debian"]), "id", "-u").strip() == str(uid)
    assert output(workspace, str(images["debian"]), "whoami").strip() == workspace.user.name
    assert output(workspace, "--root", str(images["debian"]), "id", "-u").strip() == "0"
    assert output(workspace, "--root", str(images["debian"]), "sh", "-c", "echo $HOME").strip() == "/root"
    # The remapped root has no power on the host: a root-owned host file stays unwritable.
    result = start(workspace, "--root", "-m", "/etc/hostname:/mnt/h:none:bind", str(images["debian"]),
                   "sh", "-c", "echo x >> /mnt/h")
    assert result.returncode != 0


def test_a_users_program_has_no_capability_to_regain(images: dict[str, Path], workspace: Workspace) -> None:
    """As enroot: a user's program runs with every capability set empty, its bounding set too,
    under no_new_privs and the seccomp filter; --root keeps the bounding set (apt, chown)."""
    report = ("grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '; "
              "unshare -U true && echo nested-ok")  # a new user namespace still starts with its own
    assert output(workspace, str(images["debian"]), "sh", "-c", report).splitlines() == [
        "CapEff: 0000000000000000", "CapBnd: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2", "nested-ok"]
    as_root = output(workspace, "--root", str(images["debian"]), "grep", "^CapBnd:", "/proc/self/status")
    assert as_root.split()[1] != "0000000000000000"


def test_root_filesystem_is_read_only_unless_rw(images: dict[str, Path], workspace: Workspace) -> None:
    result = start(workspace, str(images["debian"]), "touch", "/new")
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert output(workspace, "--rw", str(images["debian"]), "sh", "-c", "touch /new && echo ok") == "ok\n"
    assert output(workspace, str(images["debian"]), "sh", "-c", "touch /tmp/scratch && echo tmp") == "tmp\n"


def test_the_users_home_is_there_as_enroot_makes_it(images: dict[str, Path], workspace: Workspace) -> None:
    """Without the host's home bound, the container has the user's home from the image's
    /etc/skel (enroot's 10-shadow), so ``pip install --user`` and ``~/.cache`` work with --rw."""
    script = "ls -A ~; touch ~/.cache-marker && echo writable"
    assert output(workspace, "--rw", str(images["debian"]), "sh", "-c", script).split() == [
        ".bash_logout", ".bashrc", ".profile", "writable"]


@pytest.mark.parametrize("named", [False, True])
def test_run_and_lock_are_writable_on_a_read_only_root(named: bool, images: dict[str, Path],
                                                       workspace: Workspace) -> None:
    """As enroot's system fstab: /var/run (/run in Debian's image) and /var/lock are tmpfs of the
    container's, so a program's pid file, socket or lock works without --rw, and is gone after;
    /etc/machine-id is the host's (dbus, journald's readers)."""
    target = str(images["debian"])
    if named:
        assert workspace.run("create", "--name", "ro", target).returncode == 0
        target = "ro"
    script = ("touch /run/app.pid /var/lock/app.lock && echo written; "
              "stat -f -c %T /run /run/lock; cat /etc/machine-id")
    assert output(workspace, target, "sh", "-c", script).split() == [
        "written", "tmpfs", "tmpfs", Path("/etc/machine-id").read_text().strip()]
    assert start(workspace, target, "ls", "/run/app.pid").returncode != 0  # not kept
    assert start(workspace, target, "touch", "/etc/machine-id").returncode != 0  # read-only


def test_image_config_behaves_as_in_docker(images: dict[str, Path], workspace: Workspace) -> None:
    image = str(images["debian"])
    assert output(workspace, image) == "python 3.11.2\n"  # ENTRYPOINT + CMD
    env = output(workspace, image, "env")
    assert "HYDRIA_ENTRYPOINT=ran" in env  # the ENTRYPOINT ran before the command
    assert "GREETING=hello world" in env and "LANG=C.UTF-8" in env
    assert "HYDRIA_TEST_IMAGE" not in env  # HYDRIA_*/ENROOT_* never come from an image (as enroot)
    assert output(workspace, image, "pwd") == "/opt/hydria-test\n"  # WORKDIR


def test_host_environment_is_not_inherited(images: dict[str, Path], workspace: Workspace) -> None:
    env = output(workspace, "-e", "ADDED=1", "-e", "COPIED", str(images["debian"]), "env",
                 LEAKY="no", COPIED="yes")
    assert "LEAKY" not in env and "ADDED=1" in env and "COPIED=yes" in env


def test_exit_status_and_signals(images: dict[str, Path], workspace: Workspace) -> None:
    assert start(workspace, str(images["busybox"]), "sh", "-c", "exit 42").returncode == 42
    process = workspace.popen("start", str(images["busybox"]), "sleep", "30")
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == -signal.SIGTERM


def test_mounts(images: dict[str, Path], workspace: Workspace) -> None:
    host = workspace.root / "shared"
    host.mkdir()
    (host / "data.txt").write_text("from the host\n")
    for path in (host, host / "data.txt"):
        os.chown(path, workspace.user.uid, workspace.user.gid)
    image = str(images["busybox"])
    assert output(workspace, "-m", f"{host}:/mnt", image, "cat", "/mnt/data.txt") == "from the host\n"
    assert output(workspace, "-m", f"{host}:/mnt", image, "sh", "-c", "echo more >> /mnt/data.txt; echo ok") == "ok\n"
    refused = start(workspace, "-m", f"{host}:/mnt:ro", image, "sh", "-c", "echo more >> /mnt/data.txt")
    assert refused.returncode != 0 and "Read-only" in refused.stderr
    assert output(workspace, "-m", "tmpfs:/scratch", image, "sh", "-c", "touch /scratch/x && echo ok") == "ok\n"


def test_mount_errors_change_nothing(images: dict[str, Path], workspace: Workspace) -> None:
    missing = start(workspace, "-m", "/no/such/dir:/mnt", str(images["busybox"]), "true")
    assert missing.returncode == 1 and "failed to mount: /no/such/dir at /mnt: No such file or directory" in missing.stderr
    assert "hint: from --mount; the source /no/such/dir does not exist on this host" in missing.stderr
    escape = start(workspace, "-m", f"{workspace.root}:../escape", str(images["busybox"]), "true")
    assert escape.returncode == 1 and "Invalid cross-device link (it leads outside the container's root)" in escape.stderr


@pytest.mark.parametrize(("mount", "message", "hint"), [
    ("tmpfs:/scr:tmpfs:size=1m", "failed to mount: tmpfs at /scr: the mount point /scr does not exist in the container",
     "add x-create=dir to its options (x-create=file for a file), e.g. --mount tmpfs:/scr:tmpfs:x-create=dir,size=1m"),
    ("tmpfs:/tmp:tmpfs:sizee=1m", "failed to mount: tmpfs at /tmp: Invalid argument",
     "the kernel refused the options 'sizee=1m': check their names and values for tmpfs"),
    ("/tmp:/etc/hostname/x", ("failed to create directory: /etc/hostname/x in the container: "
                              "a part of the path is a file, not a directory"), "from --mount"),
])
def test_mount_mistakes_say_what_to_do(mount: str, message: str, hint: str, images: dict[str, Path],
                                       workspace: Workspace) -> None:
    result = start(workspace, "-m", mount, str(images["debian"]), "true")
    assert result.returncode == 1 and message in result.stderr and hint in result.stderr, result.stderr


def test_pid_and_net_namespaces(images: dict[str, Path], workspace: Workspace) -> None:
    image = str(images["busybox"])
    assert output(workspace, "--pid", image, "sh", "-c", "echo $$") == "1\n"
    assert output(workspace, "--net", image, "ls", "/sys/class/net") == "lo\n"
    assert start(workspace, "--pid", image, "sh", "-c", "exit 3").returncode == 3


@pytest.fixture
def hooks(workspace: Workspace) -> Iterator[Path]:
    directory = workspace.root / "config" / "hooks.d"
    directory.mkdir(parents=True)
    os.chown(directory, workspace.user.uid, workspace.user.gid)
    yield directory


def write_hook(directory: Path, name: str, body: str, owner: Workspace) -> None:
    hook = directory / name
    hook.write_text(body if body.startswith("#!") else "#!/bin/sh\n" + body)
    hook.chmod(0o755)
    os.chown(hook, owner.user.uid, owner.user.gid)


def test_enroot_style_hook_reaches_the_program(images: dict[str, Path], workspace: Workspace, hooks: Path) -> None:
    marker = workspace.root / "marker"
    marker.mkdir()
    (marker / "file").write_text("mounted by a hook\n")
    write_hook(hooks, "10-test.sh",
               'echo "FROM_HOOK=$ENROOT_PID" >> "$ENROOT_ENVIRON"\n'
               'printf "CHOSEN=hook\\nPATH=/hook:/bin\\n" >> "$ENROOT_ENVIRON"\n'
               f'echo "{marker} /hooked none x-create=dir,bind,ro" >> "$ENROOT_MOUNTS"\n'
               'test -d "$HYDRIA_ROOTFS/etc" || exit 9\n', workspace)
    write_hook(hooks, "20-not-executable.sh", "exit 1\n", workspace)
    (hooks / "20-not-executable.sh").chmod(0o644)
    out = output(workspace, str(images["busybox"]), "sh", "-c", "echo $FROM_HOOK; cat /hooked/file")
    pid, content = out.splitlines()
    assert pid.isdigit() and content == "mounted by a hook"
    # a hook's variables come over the image's (PATH), under --env's
    chosen = output(workspace, "--env", "CHOSEN=user", str(images["busybox"]), "sh", "-c", "echo $CHOSEN $PATH")
    assert chosen == "user /hook:/bin\n"


def test_a_hook_reads_and_edits_the_environment_that_the_container_will_have(images: dict[str, Path],
                                                                            workspace: Workspace, hooks: Path) -> None:
    """As with enroot, the hooks' environment file holds the container's environment (the image's,
    environ.d's, --env's): a site hook turns a feature on for the jobs that ask for it, changes a
    line and deletes one; a hook without a #! line runs with bash, as enroot runs it."""
    environ_d = workspace.root / "config" / "environ.d"
    environ_d.mkdir()
    (environ_d / "50-site.env").write_text("SITE_A=1\nDROPPED=1\n")
    hook = hooks / "50-site.sh"
    hook.write_text("""if grep -q '^MY_FEATURE=1$' "$ENROOT_ENVIRON"; then echo FEATURE=on >> "$ENROOT_ENVIRON"; fi
sed -i -e 's|^PATH=|PATH=/site/bin:|' -e '/^DROPPED=/d' "$ENROOT_ENVIRON"
[[ -n "${BASH_VERSION}" ]] || exit 7
""")
    hook.chmod(0o755)
    command = ("sh", "-c", "echo ${FEATURE-off} ${DROPPED-gone} $SITE_A ${PATH%%:*}")
    assert output(workspace, "--env", "MY_FEATURE=1", str(images["busybox"]), *command) == "on gone 1 /site/bin\n"
    assert output(workspace, str(images["busybox"]), *command) == "off gone 1 /site/bin\n"
    # --env's word still wins over a hook's
    assert output(workspace, "--env", "DROPPED=mine", str(images["busybox"]), *command) == "off mine 1 /site/bin\n"


ENROOT_STYLE_HOOK = """#!/bin/bash
set -euo pipefail
source "${ENROOT_LIBRARY_PATH}/common.sh"
common::checkcmd awk grep
[ -n "${ENROOT_REMAP_ROOT-}" ] && switch=on || switch=off
printf "ROOT_SWITCH=%s\nHOME_SWITCH=%s\n" "${switch}" "${ENROOT_MOUNT_HOME-unset}" >> "${ENROOT_ENVIRON}"
cat << EOF | enroot-mount --root "${ENROOT_ROOTFS}" -
MARKER /hooked none x-create=dir,bind,ro,nosuid,private
tmpfs /scratch tmpfs x-create=dir,mode=1777,size=1m
EOF
echo "written after enroot-mount" > "${ENROOT_ROOTFS}/scratch/note"
enroot-mount --root "${ENROOT_ROOTFS}" - <<< "/nonexistent /gone none x-create=dir,bind,nofail,silent"
common::log INFO "hook $(common::getpwent | cut -d: -f1) done"
"""


def test_hooks_written_for_enroot_run_unchanged(images: dict[str, Path], workspace: Workspace, hooks: Path) -> None:
    """enroot's helpers (common.sh), enroot-mount with the capabilities to mount, and switches
    that are off left unset, as enroot's own hooks and the site hooks copied from them expect."""
    marker = workspace.root / "marker"
    marker.mkdir()
    (marker / "file").write_text("mounted by enroot-mount\n")
    write_hook(hooks, "10-enroot.sh", ENROOT_STYLE_HOOK.replace("MARKER", str(marker)), workspace)
    command = ("sh", "-c", "echo $ROOT_SWITCH $HOME_SWITCH; cat /hooked/file /scratch/note; test -e /gone || echo no-gone")
    result = start(workspace, str(images["busybox"]), *command)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["off unset", "mounted by enroot-mount", "written after enroot-mount", "no-gone"]
    assert f"[INFO] hook {workspace.user.name} done" in result.stderr
    assert output(workspace, "--root", str(images["busybox"]), *command).splitlines()[0] == "on unset"
    assert output(workspace, str(images["busybox"]), *command, HYDRIA_MOUNT_HOME="y").splitlines()[0] == "off y"


def test_a_hook_that_calls_common_err_stops_the_start_with_its_message(images: dict[str, Path],
                                                                        workspace: Workspace, hooks: Path) -> None:
    write_hook(hooks, "20-check.sh", '#!/bin/bash\nsource "${ENROOT_LIBRARY_PATH}/common.sh"\n'
               'common::checkcmd no-such-tool-here\n', workspace)
    result = start(workspace, str(images["busybox"]), "echo", "should not run")
    assert result.returncode == 1 and "should not run" not in result.stdout
    assert "[ERROR] Command not found: no-such-tool-here" in result.stderr
    assert "20-check.sh exited with return code 1" in result.stderr


def test_failing_hook_aborts_the_start(images: dict[str, Path], workspace: Workspace, hooks: Path) -> None:
    write_hook(hooks, "50-fail.sh", "echo oops >&2; exit 3\n", workspace)
    result = start(workspace, str(images["busybox"]), "echo", "should not run")
    assert result.returncode == 1
    assert "oops" in result.stderr and "50-fail.sh exited with return code 3" in result.stderr
    assert "should not run" not in result.stdout


def test_named_container_persists_writes(images: dict[str, Path], workspace: Workspace) -> None:
    assert workspace.run("create", "--name", "app", str(images["debian"])).returncode == 0
    assert workspace.run("list").stdout == "app\n"
    assert output(workspace, "--rw", "app", "sh", "-c", "echo kept > /state.txt && echo ok") == "ok\n"
    assert output(workspace, "app", "cat", "/state.txt") == "kept\n"
    again = workspace.run("create", "--name", "app", str(images["debian"]))
    assert again.returncode == 1 and "File already exists" in again.stderr
    assert workspace.run("create", "--force", "--name", "app", str(images["debian"])).returncode == 0
    assert start(workspace, "app", "cat", "/state.txt").returncode != 0  # a fresh container
    assert workspace.run("remove", "-f", "app").returncode == 0
    assert workspace.run("list").stdout == ""


@pytest.mark.parametrize("rewrite", ["another image", "the same image", "cut short"])
def test_a_named_container_stays_what_it_was_created_from(rewrite: str, images: dict[str, Path],
                                                          workspace: Workspace) -> None:
    """``create`` links the image file: rewriting that file in place (``cp other.sqsh mine.sqsh``
    writes into the shared inode) must not turn the container into another image."""
    mine = workspace.out / "mine.sqsh"
    shutil.copyfile(images["busybox"], mine)
    os.chown(mine, workspace.user.uid, workspace.user.gid)  # the user's own file: hardlinked
    assert workspace.run("create", "-n", "mine", str(mine)).returncode == 0
    assert mine.stat().st_nlink > 1  # a link, not a copy (a bound on its time measured the machine)
    assert output(workspace, "--rw", "mine", "sh", "-c", "echo kept > /state.txt && echo ok") == "ok\n"
    source = {"another image": images["debian"], "the same image": images["busybox"]}.get(rewrite)
    data = source.read_bytes() if source else mine.read_bytes()[:60000]
    with open(mine, "r+b") as handle:  # as cp does: truncate and write the same inode
        handle.truncate(0)
        handle.write(data)
    result = start(workspace, "mine", "cat", "/state.txt")
    if rewrite == "the same image":
        assert result.returncode == 0 and result.stdout == "kept\n", result.stderr
        return
    assert result.returncode == 1 and "Traceback" not in result.stderr
    expected = "is truncated" if rewrite == "cut short" else "changed since the container was created"
    assert "[ERROR] container mine: " in result.stderr and expected in result.stderr, result.stderr
    assert "hydria create --force --name mine IMAGE" in result.stderr
    assert workspace.run("remove", "-f", "mine").returncode == 0


def test_unpacked_container(images: dict[str, Path], workspace: Workspace) -> None:
    assert workspace.run("create", "--unpack", "-n", "flat", str(images["busybox"])).returncode == 0
    assert (workspace.root / "data" / "flat" / "rootfs" / "bin" / "busybox").is_file()
    assert output(workspace, "flat", "cat", "/etc/os-release").startswith('PRETTY_NAME="hydria busybox')
    assert workspace.run("remove", "-f", "flat").returncode == 0


def test_remove_asks_and_defaults_to_no(images: dict[str, Path], workspace: Workspace) -> None:
    assert workspace.run("create", "-n", "keep", str(images["busybox"])).returncode == 0
    answer = run_as(workspace.user, [workspace.hydria, "remove", "keep"], env=workspace.env(), input="n\n")
    assert "Do you really want to delete" in answer.stderr
    assert workspace.run("list").stdout == "keep\n"
    unanswered = run_as(workspace.user, [workspace.hydria, "remove", "keep"], env=workspace.env(), input="")
    assert unanswered.returncode == 1 and "no answer" in unanswered.stderr and "remove -f" in unanswered.stderr
    assert workspace.run("list").stdout == "keep\n"  # a script without -f learns that it is still there
    answer = run_as(workspace.user, [workspace.hydria, "remove", "keep"], env=workspace.env(), input="y\n")
    assert workspace.run("list").stdout == ""


@pytest.mark.parametrize(("args", "message"), [
    (("create", "-n", "a/b", "IMAGE"), "Invalid argument: a/b"),
    (("create", "-n", "..", "IMAGE"), "Invalid argument: .."),
    (("create", "-n", "x" * 256, "IMAGE"), "Invalid argument"),
    (("create", "/no/such.sqsh"), "No such file or directory: /no/such.sqsh"),
    (("start", "missing"), "No such container: missing\n[INFO] hint: you have no containers: create it first"),
    (("start", "./missing.sqsh"), "No such file or directory"),
    (("remove", "-f", "missing"), "No such container: missing\n[INFO] hint: you have no containers"),
    (("export", "missing"), "No such container: missing\n[INFO] hint: you have no containers"),
    (("exec", "999999999", "true"), "Process not found: 999999999\n[INFO] hint: hydria list --fancy shows the PIDs"),
    (("exec", "1", "true"), "Process not found: 1\n[INFO] hint: the process belongs to another user"),
    (("start", "-e", "1BAD=x", "IMAGE", "true"), "Invalid argument: 1BAD=x"),
    (("start",), "a container name or image file is required"),
    (("start", "--conf", "/tmp", "IMAGE", "true"), "--conf /tmp: Is a directory"),
    (("start", "--rc", "/tmp", "IMAGE", "true"), "--rc /tmp: Is a directory"),
    (("start", "--conf", "/no/such.conf", "IMAGE", "true"), "No such file or directory: /no/such.conf"),
    (("start", "--rc", "/etc/shadow", "IMAGE", "true"), "Permission denied: /etc/shadow (--rc: mode 0640, owner root)"),
])
def test_bad_input(args: tuple[str, ...], message: str, images: dict[str, Path], workspace: Workspace) -> None:
    argv = [str(images["busybox"]) if a == "IMAGE" else a for a in args]
    result = workspace.run(*argv)
    assert result.returncode == 1 and message in result.stderr
    data = workspace.root / "data"
    assert not data.exists() or list(data.iterdir()) == []


def test_a_mount_source_behind_a_folder_the_user_may_not_pass(images: dict[str, Path],
                                                               workspace: Workspace) -> None:
    private = workspace.root / "private"
    (private / "sub").mkdir(parents=True)
    private.chmod(0o700)  # root's: the test user may not pass
    result = start(workspace, "-m", f"{private}/sub:/mnt", str(images["busybox"]), "true")
    assert result.returncode == 1
    assert (f"failed to mount: {private}/sub at /mnt: Permission denied\n[INFO] hint: from --mount; {private} "
            f"(mode 0700) does not let you through to {private}/sub") in result.stderr


def test_a_mount_of_what_the_user_may_not_use_is_named(images: dict[str, Path], workspace: Workspace) -> None:
    private = workspace.root / "private"
    private.mkdir()
    private.chmod(0o700)  # root's: nothing in it is the test user's to use
    secret = workspace.root / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    own = workspace.out
    result = start(workspace, "-m", f"{private}:/mnt", "-m", f"{secret}:/secret:x-create=file", "-m", f"{own}:/own",
                   str(images["busybox"]), "ls", "/own")
    assert result.returncode == 0, result.stderr  # made all the same, as enroot makes it
    assert (f"[WARN] mount {private} at /mnt: {private} is a folder you may not open (mode 0700): nothing in the "
            "container can use it\n[INFO] hint: mount a path you can read, or ask its owner for access\n") in result.stderr
    assert f"{secret} is a file you may neither read nor write (mode 0600)" in result.stderr
    assert f"{own} is" not in result.stderr


def test_a_hydria_option_after_the_image_is_named(images: dict[str, Path], workspace: Workspace) -> None:
    """Options after the image are the container's (as enroot): where the image has no entrypoint
    to take one of hydria's, the start says so instead of failing with 'not found'."""
    result = start(workspace, str(images["busybox"]), "--rw", "touch", "/x")
    assert result.returncode == 1
    assert "--rw after the image is the container's command, and the image has no entrypoint" in result.stderr
    assert f"hydria's options go before the image: hydria start --rw ... {images['busybox']}" in result.stderr
    assert output(workspace, str(images["busybox"]), "echo", "--rw") == "--rw\n"  # not the first word: fine
    given = start(workspace, str(images["debian"]), "--rw")  # an entrypoint takes it, as with enroot
    assert "after the image is the container's command" not in given.stderr


def test_an_option_that_took_the_container_as_its_value_is_named(images: dict[str, Path],
                                                                  workspace: Workspace) -> None:
    """``hydria start --env c true``: --env takes ``c``, and ``true`` is read as the container."""
    assert workspace.run("create", "-n", "c", str(images["busybox"])).returncode == 0
    result = start(workspace, "--env", "c", "true")
    assert result.returncode == 1 and "No such container: true" in result.stderr
    assert "hint: --env took c as its value, so true was read as the container: give --env its value first" \
        in result.stderr
    shutil.copy(images["busybox"], workspace.out / "app.sqsh")
    result = workspace.run("start", "--rc", "app.sqsh", "echo", "hi", cwd=workspace.out)
    assert result.returncode == 1 and "hint: --rc took app.sqsh as its value, so echo was read" in result.stderr
    plain = start(workspace, "--env", "HOME", "nosuch")
    assert "No such container: nosuch\n[INFO] hint: your containers: c (create it: hydria create --name nosuch IMAGE)" \
        in plain.stderr
    typo = start(workspace, "cc", "true")
    assert "No such container: cc\n[INFO] hint: did you mean c? (hydria list shows your containers)" in typo.stderr


def test_exec_into_a_process_that_is_no_container_is_refused(workspace: Workspace) -> None:
    """A PID of the user's own outside any container (a typo, a shell): the command would run on
    the host, where the user meant the container."""
    sleeper = subprocess.Popen(["sleep", "30"], user=workspace.user.uid, group=workspace.user.gid, extra_groups=[])
    try:
        result = workspace.run("exec", str(sleeper.pid), "touch", str(workspace.out / "ran"))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 1
    assert f"process {sleeper.pid} is not in a container: it shares this process's mount namespace" in result.stderr
    assert not (workspace.out / "ran").exists()


def test_conf_may_be_dev_null(images: dict[str, Path], workspace: Workspace) -> None:
    assert output(workspace, "--conf", "/dev/null", str(images["busybox"]), "echo", "started") == "started\n"


def test_not_an_image(workspace: Workspace) -> None:
    bogus = workspace.out / "bogus.sqsh"
    bogus.write_text("not squashfs")
    assert "Invalid image format" in workspace.run("create", str(bogus)).stderr


@pytest.mark.parametrize("command", [("start",), ("create",), ("bundle",)])
def test_a_bad_image_file_is_named_for_what_is_wrong(command: tuple[str, ...], images: dict[str, Path],
                                                     workspace: Workspace, other_workspace: Workspace) -> None:
    """Not a missing container, nor the kernel's overlay: the file's own problem, with the fix,
    whether the image is named with a path or as a file here (as users write it)."""
    truncated = workspace.out / "cut.sqsh"
    truncated.write_bytes(images["busybox"].read_bytes()[:50000])
    private = other_workspace.out / "theirs.sqsh"
    private.write_bytes(images["busybox"].read_bytes())
    private.chmod(0o600)
    os.chown(private, other_workspace.user.uid, other_workspace.user.gid)
    other_workspace.out.chmod(0o755)
    cases = {
        "cut.sqsh": "Invalid image format: cut.sqsh is truncated (50000 of its ",
        str(truncated): "is truncated",
        str(private): f"Permission denied: {private} (mode 0600, owner {other_workspace.user.name})",
        "absent.sqsh": f"No such file or directory: {workspace.out}/absent.sqsh",
        str(workspace.out): "is a directory",
    }
    for target, message in cases.items():
        result = workspace.run(*command, target)
        assert result.returncode == 1 and message in result.stderr, (target, result.stderr)
        assert "Traceback" not in result.stderr and "overlay" not in result.stderr
    assert "nor is there a container named absent.sqsh" in workspace.run("start", "absent.sqsh").stderr
    data = workspace.root / "data"
    assert not data.exists() or list(data.iterdir()) == []
    assert sorted(p.name for p in workspace.out.iterdir()) == ["cut.sqsh"]  # nothing written


def test_users_cannot_see_or_remove_each_others_containers(images: dict[str, Path], workspace: Workspace,
                                                           other_workspace: Workspace) -> None:
    assert workspace.run("create", "-n", "mine", str(images["busybox"])).returncode == 0
    data = workspace.root / "data"
    peek = other_workspace.run("list", HYDRIA_DATA_PATH=str(data))
    assert "mine" not in peek.stdout
    steal = other_workspace.run("remove", "-f", "mine", HYDRIA_DATA_PATH=str(data))
    assert steal.returncode == 1
    assert workspace.run("list").stdout == "mine\n"


def test_exec_joins_a_running_container(images: dict[str, Path], workspace: Workspace,
                                        other_workspace: Workspace) -> None:
    process = workspace.popen("start", "-e", "MARK=inside", str(images["busybox"]), "sleep", "30")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{process.pid}/cmdline", "rb") as handle:
                if handle.read().startswith(b"sleep"):
                    break
            time.sleep(0.05)
        pid = str(process.pid)
        assert 'PRETTY_NAME="hydria busybox' in workspace.run("exec", pid, "cat", "/etc/os-release").stdout
        env = workspace.run("exec", "-e", "EXTRA=1", pid, "env").stdout
        assert "MARK=inside" in env and "EXTRA=1" in env
        assert workspace.run("exec", pid, "sh", "-c", "exit 5").returncode == 5
        assert "Seccomp:\t2" in workspace.run("exec", pid, "cat", "/proc/self/status").stdout  # the filter too
        assert "Process not found" in other_workspace.run("exec", pid, "true").stderr
    finally:
        process.kill()
        process.wait()
    assert "Process not found: 999999" in workspace.run("exec", "999999", "true").stderr


def test_nothing_lingers_after_the_program_exits(images: dict[str, Path], workspace: Workspace) -> None:
    workspace.run("create", "-n", "lingers", str(images["busybox"]))
    for target in (str(images["busybox"]), "lingers"):
        assert output(workspace, target, "true") == ""
    assert live_processes(workspace.user) == []  # squashfuse went with the containers' mount namespaces


def test_list_fancy_shows_running_containers(images: dict[str, Path], busybox: PublishedImage,
                                             workspace: Workspace) -> None:
    for name in ("idle", "busy"):
        assert workspace.run("create", "-n", name, str(images["busybox"])).returncode == 0
    assert workspace.run("create", "--unpack", "-n", "flat", str(images["busybox"])).returncode == 0
    marker = workspace.out / "running"
    busy = subprocess.Popen([workspace.hydria, "start", "-m", f"{workspace.out}:/out", "busy", "sh", "-c",
                             "touch /out/running; exec sleep 30"], user=workspace.user.uid,
                            group=workspace.user.gid, extra_groups=[], env=workspace.user.environment(workspace.env()))
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        table = workspace.run("list", "--fancy").stdout.splitlines()
        assert table[0].split() == ["NAME", "PID", "COMM", "STATE", "STARTED", "TIME", "MNTNS", "USERNS", "COMMAND"]
        rows = {line.split()[0]: line.split() for line in table[1:]}
        assert rows["idle"] == ["idle"]  # not running: the name only
        assert rows["busy"][1] == str(busy.pid) and rows["busy"][2] == "sleep" and rows["busy"][-2:] == ["sleep", "30"]
        assert "<unknown>" not in rows
        listed = {row["name"]: row for row in json.loads(workspace.run("list", "--json").stdout)}
        recorded = {"reference": busybox.docker_uri, "digest": busybox.digest}  # where the image came from
        assert listed["idle"] == {"name": "idle", "path": str(workspace.root / "data" / "idle"), "kind": "image",
                                  **recorded, "processes": []}
        assert listed["flat"] == {"name": "flat", "path": str(workspace.root / "data" / "flat"), "kind": "unpacked",
                                  **recorded, "processes": []}
        [process] = listed["busy"]["processes"]
        assert process["pid"] == busy.pid and process["comm"] == "sleep" and process["command"] == "sleep 30"
        assert set(process) == {"pid", "comm", "state", "started", "time", "mntns", "userns", "command"}
    finally:
        busy.kill()
        busy.wait()


def test_remove_refuses_a_running_container(images: dict[str, Path], workspace: Workspace) -> None:
    for name in ("idle", "busy"):
        assert workspace.run("create", "-n", name, str(images["busybox"])).returncode == 0
    marker = workspace.out / "running"
    busy = workspace.popen("start", "-m", f"{workspace.out}:/out", "busy", "sh", "-c", "touch /out/running; exec sleep 30")
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = workspace.run("remove", "-f", "idle", "busy")
        assert result.returncode == 1
        assert f"Device or resource busy: container busy is running (PID {busy.pid})" in result.stderr
        assert workspace.run("list").stdout.split() == ["busy", "idle"]  # nothing removed, idle neither
        # The Python API passes the same check (the store's), not only the command line.
        script = "import hydria, sys\nfrom hydria.errors import HydriaError\ntry:\n    hydria.remove('busy')\nexcept HydriaError as e:\n    print(e.message)"
        refused = run_as(workspace.user, [sys.executable, "-c", script], env=workspace.env(), cwd=workspace.out)
        assert refused.stdout.startswith("Device or resource busy: container busy is running"), refused.stderr
        assert workspace.run("list").stdout.split() == ["busy", "idle"]
    finally:
        busy.kill()
        busy.wait()
    assert workspace.run("remove", "-f", "idle", "busy").returncode == 0


def test_remove_of_several_names_removes_those_that_exist(images: dict[str, Path], workspace: Workspace) -> None:
    for name in ("first", "last"):
        assert workspace.run("create", "-n", name, str(images["busybox"])).returncode == 0
    result = workspace.run("remove", "-f", "missing", "first", "other", "last", "first")
    assert result.returncode == 1
    assert workspace.run("list").stdout.split() == []  # both removed, past the missing names
    for name in ("missing", "other"):  # each missing one reported as typed, with the way on
        assert f"No such container: {name}" in result.stderr
    assert str(workspace.root / "data") not in result.stderr
    assert result.stderr.count("hint: your containers: ") == 2


def test_list_fancy_shows_containers_of_image_files_as_unknown(images: dict[str, Path], workspace: Workspace) -> None:
    """As enroot: a running container that is not in the data path is listed as <unknown>."""
    assert workspace.run("create", "-n", "named", str(images["busybox"])).returncode == 0
    marker = workspace.out / "running"
    from_file = workspace.popen("start", "-m", f"{workspace.out}:/out", str(images["busybox"]), "sh", "-c",
                                "touch /out/running; exec sleep 30")
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = [line.split() for line in workspace.run("list", "--fancy").stdout.splitlines()[1:]]
        assert [row[:3] for row in rows] == [["<unknown>", str(from_file.pid), "sleep"], ["named"]]
        assert workspace.run("list").stdout == "named\n"
    finally:
        from_file.kill()
        from_file.wait()


def test_rc_file_replaces_the_images_rc(images: dict[str, Path], workspace: Workspace) -> None:
    rc = workspace.out / "rc.sh"
    rc.write_text('echo "custom rc: $*"\nexec "$@"\n')
    assert output(workspace, "--rc", str(rc), str(images["busybox"]), "id", "-u") == \
        f"custom rc: id -u\n{workspace.user.uid}\n"
    result = start(workspace, "--rc", str(workspace.out / "missing.sh"), str(images["busybox"]), "true")
    assert result.returncode == 1 and "No such file or directory" in result.stderr


CONF_SCRIPT = """#HYDRIA_ROOTFS={image}
#ENROOT_REMAP_ROOT=y
environ() {{
    echo "FROM_CONF=conf value"
    echo "GREETING=from the conf"
}}
mounts() {{
    echo "{host} /mnt/conf none x-create=dir,bind,ro"
}}
hooks() {{
    echo "FROM_HOOK=$(test -d "$ENROOT_ROOTFS/etc" && echo saw-rootfs)" >> "$HYDRIA_ENVIRON"
    echo "hooks() output is discarded"
}}
rc() {{
    echo "rc from the conf: $*"
    exec "$@"
}}
"""


def test_conf_script_and_batch(images: dict[str, Path], workspace: Workspace) -> None:
    host = workspace.out / "shared"
    host.mkdir()
    (host / "file").write_text("from the host\n")
    conf = workspace.out / "job.conf"
    conf.write_text(CONF_SCRIPT.format(image=images["busybox"], host=host))
    probe = ["sh", "-c", 'id -u; echo "$FROM_CONF|$FROM_HOOK|$GREETING"; cat /mnt/conf/file']
    expected = ["rc from the conf: " + " ".join(probe), "0", "conf value|saw-rootfs|from the conf", "from the host"]
    assert output(workspace, "--conf", str(conf), str(images["busybox"]), *probe).splitlines() == expected
    result = workspace.run("batch", str(conf), *probe)  # the image comes from #HYDRIA_ROOTFS
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
    # --env still wins over environ(), --rc over rc()
    rc = workspace.out / "rc.sh"
    rc.write_text('exec "$@"\n')
    out = output(workspace, "--conf", str(conf), "--rc", str(rc), "-e", "GREETING=cli", str(images["busybox"]),
                 "sh", "-c", "echo $GREETING")
    assert out == "cli\n"


@pytest.mark.parametrize(("text", "command", "message"), [
    ("environ() {\n echo x\n", "start", "Invalid argument: "),  # bash -n fails
    ("true\n", "batch", "Missing directive ENROOT_ROOTFS in "),
    ("hooks() {\n exit 3\n}\n", "start", "exited with return code 3"),
    # a directive's bad value is the script's, not an environment variable's
    ("#ENROOT_REMAP_ROOT=maybe\n", "start", "bad.conf: directive #HYDRIA_REMAP_ROOT=maybe: 'maybe' is not a boolean"),
    ("#HYDRIA_MAX_CONNECTIONS=many\n", "start", "directive #HYDRIA_MAX_CONNECTIONS=many: 'many' is not a"),
])
def test_conf_script_errors(images: dict[str, Path], workspace: Workspace, text: str, command: str,
                            message: str) -> None:
    conf = workspace.out / "bad.conf"
    conf.write_text(text)
    args = ["start", "--conf", str(conf), str(images["busybox"]), "true"] if command == "start" else ["batch", str(conf)]
    result = workspace.run(*args)
    assert result.returncode == 1 and message in result.stderr
    missing = workspace.run("start", "--conf", str(workspace.out / "none.conf"), str(images["busybox"]), "true")
    assert missing.returncode == 1 and "No such file or directory" in missing.stderr


def test_a_running_pid_container_does_not_hold_the_setup_lock(images: dict[str, Path], workspace: Workspace) -> None:
    assert workspace.run("create", "-n", "pidns", str(images["busybox"])).returncode == 0
    marker = workspace.out / "up"
    first = subprocess.Popen([workspace.hydria, "start", "--pid", "-m", f"{workspace.out}:/out", "pidns", "sh", "-c",
                              "touch /out/up; exec sleep 30"], user=workspace.user.uid, group=workspace.user.gid,
                             extra_groups=[], env=workspace.user.environment(workspace.env()))
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        began = time.monotonic()
        assert output(workspace, "pidns", "echo", "second") == "second\n"  # a second start, at once
        assert time.monotonic() - began < 10
    finally:
        first.kill()  # hydria, the waiting parent: its container (PID 1) goes with it
        first.wait()
    assert live_processes(workspace.user) == []


def test_host_time_zone(images: dict[str, Path], workspace: Workspace) -> None:
    out = output(workspace, str(images["busybox"]), "sh", "-c", "readlink /etc/localtime; cat /etc/localtime | wc -c")
    if os.path.islink("/etc/localtime"):  # the host's zone, copied (enroot's 10-localtime hook)
        link, size = out.split()
        assert link == os.readlink("/etc/localtime") and int(size) == os.path.getsize("/etc/localtime")
    else:
        assert out.split() == ["0"]  # the busybox image has none, and the host gives none


DEVICES = ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom",
           "zero"]


@pytest.mark.parametrize("how", ["--ipc", "HYDRIA_RESTRICT_DEV"])
def test_a_dev_of_its_own(images: dict[str, Path], workspace: Workspace, how: str) -> None:
    """--ipc and HYDRIA_RESTRICT_DEV give a minimal /dev (enroot's devices hook); --ipc also a
    private /dev/shm, while HYDRIA_RESTRICT_DEV alone keeps the host's."""
    marker = f"hydria-test-shm-{os.getpid()}-{how.strip('-')}"
    args, env = (["--ipc"], {}) if how == "--ipc" else ([], {"HYDRIA_RESTRICT_DEV": "y"})
    try:
        out = output(workspace, *args, str(images["busybox"]), "sh", "-c",
                     f"ls /dev; echo x > /dev/null; head -c 3 /dev/zero | wc -c; touch /dev/shm/{marker}", **env)
        listed, count = out.split()[:-1], out.split()[-1]
        assert [d for d in listed if d != "mqueue"] == DEVICES and count == "3"
        assert (Path("/dev/shm") / marker).exists() == (how != "--ipc")
    finally:
        (Path("/dev/shm") / marker).unlink(missing_ok=True)
    host_dev = output(workspace, str(images["busybox"]), "ls", "/dev").split()  # the host's /dev otherwise
    assert len(host_dev) > len(DEVICES) and set(host_dev) != set(DEVICES)


def test_the_container_sees_its_own_cgroups(images: dict[str, Path], workspace: Workspace) -> None:
    out = workspace.run("start", str(images["busybox"]), "sh", "-c",
                        "cat /proc/self/cgroup; echo; touch /sys/fs/cgroup/x 2>/dev/null || echo read-only").stdout
    groups, _, rest = out.partition("\n\n")
    assert groups and all(line.endswith(":/") for line in groups.splitlines())  # a cgroup namespace of its own
    assert rest == "read-only\n"


def test_allow_superuser_keeps_roots_privileges(images: dict[str, Path], hydria_bin: str, tmp_path: Path) -> None:
    # real root (the test runner), as enroot's privileged mode: no user namespace, no seccomp filter
    env = {"PATH": "/usr/bin:/bin", "HYDRIA_RUNTIME_PATH": str(tmp_path / "run"), "HYDRIA_DATA_PATH": str(tmp_path)}
    show = "cat /proc/self/uid_map; grep '^Seccomp:' /proc/self/status; mknod /tmp/null c 1 3 && echo mknod-ok"
    privileged = subprocess.run([hydria_bin, "start", str(images["busybox"]), "sh", "-c", show], capture_output=True,
                                text=True, env={**env, "HYDRIA_ALLOW_SUPERUSER": "y"}, check=True).stdout.split()
    assert privileged == ["0", "0", "4294967295", "Seccomp:", "0", "mknod-ok"]
    plain = subprocess.run([hydria_bin, "start", str(images["busybox"]), "sh", "-c", show], capture_output=True,
                           text=True, env=env, check=False).stdout.split()
    assert plain[:5] == ["0", "0", "1", "Seccomp:", "2"] and "mknod-ok" not in plain  # a user namespace


def test_the_squashfuse_daemon_keeps_no_descriptor_of_the_caller(images: dict[str, Path],
                                                                 workspace: Workspace) -> None:
    # A caller waiting for the end of a pipe it gave hydria (as srun, sshd or a test harness do)
    # sees it as soon as the program closes its copy, not when the image's FUSE daemon ends.
    reader, writer = os.pipe()
    process = subprocess.Popen([workspace.hydria, "start", str(images["busybox"]), "sh", "-c",
                                f"exec {writer}>&-; exec sleep 30"], pass_fds=(writer,), user=workspace.user.uid,
                               group=workspace.user.gid, extra_groups=[], cwd=workspace.out,
                               env=workspace.user.environment(workspace.env()))
    os.close(writer)
    try:
        assert os.read(reader, 1) == b""  # every writer gone
        assert process.poll() is None, "a copy of the pipe outlived the program's own"  # it sleeps on
    finally:
        os.close(reader)
        process.kill()  # sleep itself (exec): the container ends with it
        process.wait()


def test_namespaces_wait_for_a_leaving_thread(workspace: Workspace) -> None:
    # A Slurm step imports its image in the process that then starts the container; unshare
    # (CLONE_NEWUSER) refuses a process that still has a thread (EINVAL), as a thread Python has
    # already joined can be for a moment. Here one lives 0.3 s past the call.
    python = str(Path(workspace.hydria).with_name("python"))
    program = ("import threading, time\n"
               "from hydria.config import load_settings\n"
               "from hydria.runtime import namespaces\n"
               "threading.Thread(target=time.sleep, args=(0.3,)).start()\n"
               "namespaces.enter(load_settings(), os.getuid(), os.getgid())\n"
               "print(open('/proc/self/uid_map').read().split())\n")
    result = run_as(workspace.user, [python, "-c", "import os\n" + program], env=workspace.env(), cwd=workspace.out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"['{workspace.user.uid}', '{workspace.user.uid}', '1']"


def test_config_files_with_bytes_that_are_not_utf8(images: dict[str, Path], workspace: Workspace) -> None:
    """A non-UTF-8 byte in mounts.d or environ.d is kept as it is, not a crash of every start."""
    for folder, name, content in (("mounts.d", "x.fstab", b"# caf\xe9\ntmpfs /caf\xe9\n"),
                                  ("environ.d", "x.env", b"LATIN1=caf\xe9\n")):
        directory = workspace.root / "config" / folder
        directory.mkdir(exist_ok=True)
        (directory / name).write_bytes(content)
        os.chown(directory, workspace.user.uid, workspace.user.gid)
    result = run_as(workspace.user, [workspace.hydria, "start", str(images["busybox"]), "sh", "-c",
                                     "echo $LATIN1 | od -c | head -1; ls -d /caf*"],
                    env=workspace.env(), cwd=workspace.out)
    assert result.returncode == 0, result.stderr
    assert "c   a   f 351" in result.stdout and "/caf" in result.stdout


def test_a_bind_mount_option_that_means_nothing(images: dict[str, Path], workspace: Workspace) -> None:
    """The kernel ignores file system options on a bind mount: refused on the command line (a typo
    of ro would mount read-write), warned about in a configuration file (as enroot mounts it)."""
    refused = start(workspace, "-m", f"{workspace.out}:/mnt:none:bind,r0", str(images["busybox"]), "true")
    assert refused.returncode == 1 and "'r0' is no option of a bind mount" in refused.stderr
    directory = workspace.root / "config" / "mounts.d"
    directory.mkdir(exist_ok=True)
    (directory / "site.fstab").write_text(f"{workspace.out} /mnt none x-create=dir,bind,r0\n")
    warned = start(workspace, str(images["busybox"]), "true")
    assert warned.returncode == 0
    assert f"[WARN] {workspace.out} at /mnt: 'r0' is no option of a bind mount (from {directory}/site.fstab:1): " \
           "ignored" in warned.stderr


def test_mounts_d_entries_of_pass_minus_one_are_mounted_before_the_hooks(images: dict[str, Path],
                                                                        workspace: Workspace, hooks: Path) -> None:
    """As enroot mounts its 10-system.fstab: a site's mounts.d entry of pass -1 is there when the
    hooks run; one of a pass nothing mounts is said, not silently dropped; --mount takes pass 0."""
    (workspace.out / "site").mkdir()
    (workspace.out / "site" / "file").write_text("early\n")
    directory = workspace.root / "config" / "mounts.d"
    directory.mkdir(exist_ok=True)
    (directory / "50-site.fstab").write_text(f"{workspace.out}/site /early none x-create=dir,bind,ro 0 -1\n"
                                             f"{workspace.out}/site /never none x-create=dir,bind,ro 0 2\n")
    write_hook(hooks, "50-reads.sh", 'echo "SEEN=$(cat "$ENROOT_ROOTFS/early/file")" >> "$ENROOT_ENVIRON"\n', workspace)
    result = start(workspace, str(images["busybox"]), "sh", "-c", "echo $SEEN; cat /early/file; ls /never")
    assert result.returncode != 0 and result.stdout == "early\nearly\n", result.stderr
    assert f"[WARN] {workspace.out}/site at /never (from {directory}/50-site.fstab:2): not mounted: its pass, 2," \
        in result.stderr
    refused = start(workspace, "-m", f"{workspace.out}/site:/x:none:bind:0:-1", str(images["busybox"]), "true")
    assert refused.returncode == 1 and "never in pass -1" in refused.stderr


def test_enroots_own_hooks_and_mount_files_in_a_kept_folder_are_left_out(images: dict[str, Path],
                                                                          workspace: Workspace, hooks: Path) -> None:
    """A configuration folder kept from enroot with its standard files still there: hydria does
    their work itself, and running them too would undo its choices (enroot's 10-system.fstab
    mounts /tmp 755 over hydria's 1777); they are left out with one warning, the site's own run."""
    directory = workspace.root / "config" / "mounts.d"
    directory.mkdir(exist_ok=True)
    (directory / "10-system.fstab").write_text("tmpfs /tmp tmpfs x-create=dir,rw,nosuid,nodev,mode=755 0 -1\n")
    write_hook(hooks, "10-shadow.sh", "exit 1\n", workspace)
    write_hook(hooks, "50-site.sh", 'echo "SITE=ran" >> "$ENROOT_ENVIRON"\n', workspace)
    result = start(workspace, str(images["busybox"]), "sh", "-c", "stat -c %a /tmp; echo $SITE")
    assert result.returncode == 0 and result.stdout == "1777\nran\n", result.stderr
    assert result.stderr.count("[WARN]") == 1
    assert f"left out, since hydria does their work itself: {hooks}/10-shadow.sh, {directory}/10-system.fstab " \
        in result.stderr


def test_concurrent_forced_creates_of_one_name(images: dict[str, Path], workspace: Workspace) -> None:
    """Each one succeeds (--force: the last one stays); the container that is left works, and
    nothing else is left, also of creates and removals that were killed."""
    assert workspace.run("create", "-n", "same", str(images["busybox"])).returncode == 0
    processes = [workspace.popen("create", "-f", "-n", "same", str(images["busybox"])) for _ in range(16)]
    killed = [workspace.popen("create", "-f", "-n", "same", str(images["busybox"])) for _ in range(4)]
    time.sleep(0.3)
    for process in killed:  # mid-create, or done: what a kill -9 leaves the next create sweeps
        process.kill()
        process.communicate()
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in processes]
    for code, stderr in results:
        assert code == 0 and stderr == f"[INFO] Container same created from {images['busybox']}\n", stderr
    data = workspace.root / "data"
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this node that no longer exists
    for leftover in (f".same.creating.{os.uname().nodename}.{gone.pid}",
                     f".other.removing.{os.uname().nodename}.{gone.pid}.12345"):
        (data / leftover / "upper").mkdir(parents=True)
        for path in (data / leftover, data / leftover / "upper"):
            os.chown(path, workspace.user.uid, workspace.user.gid)
    assert workspace.run("create", "-f", "-n", "same", str(images["busybox"])).returncode == 0
    assert output(workspace, "same", "cat", "/etc/os-release").startswith("PRETTY_NAME")
    assert sorted(p.name for p in data.iterdir()) == ["same"]  # no staging or removed trees left


def test_the_home_directory_is_home_also_under_root(images: dict[str, Path], workspace: Workspace) -> None:
    """As enroot: $HOME (not the passwd entry) is bound, at /root when the user is remapped to root."""
    home = workspace.root / "home"
    home.mkdir()
    (home / "marker").write_text("mine\n")
    os.chown(home, workspace.user.uid, workspace.user.gid)
    shown = output(workspace, "--root", str(images["busybox"]), "cat", "/root/marker", HYDRIA_MOUNT_HOME="y", HOME=str(home))
    assert shown == "mine\n"
    assert output(workspace, str(images["busybox"]), "cat", f"{home}/marker", HYDRIA_MOUNT_HOME="y", HOME=str(home)) == "mine\n"


def test_a_home_with_mounts_inside_is_bound_whole(images: dict[str, Path], workspace: Workspace) -> None:
    """As enroot (rbind): a home (``$HOME``, here not the passwd entry's) that holds mounts (a
    scratch file system, an automounted folder, another user's step's mount in a shared folder)
    is bound with them, and the container's ``$HOME`` names where. A bind of such a folder alone
    is refused in a user namespace (it would uncover what the mounts hide): the error says to
    bind it with them."""
    home = workspace.root / "home-with-mounts"
    (home / "scratch").mkdir(parents=True)
    os.chown(home, workspace.user.uid, workspace.user.gid)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=1m,uid={workspace.user.uid}", "tmpfs", str(home / "scratch")],
                   check=True)
    try:
        (home / "scratch" / "marker").write_text("on the scratch mount\n")
        for root, inside in ((["--root"], "/root"), ([], str(home))):  # $HOME is where it is bound, as enroot sets it
            shown = output(workspace, *root, str(images["busybox"]), "sh", "-c", 'echo $HOME; cat "$HOME/scratch/marker"',
                           HYDRIA_MOUNT_HOME="y", HOME=str(home))
            assert shown == f"{inside}\non the scratch mount\n"
        alone = workspace.run("start", "--mount", f"{home}:/mnt:none:x-create=dir,bind", str(images["busybox"]), "true")
        assert alone.returncode != 0 and f"failed to mount: {home} at /mnt: Invalid argument" in alone.stderr
        assert "may hold other mounts" in alone.stderr and "(rbind)" in alone.stderr, alone.stderr
    finally:
        subprocess.run(["umount", "--lazy", str(home / "scratch")], check=True)


def test_login_shell_reads_profile_d_as_enroot_does(images: dict[str, Path], workspace: Workspace) -> None:
    """HYDRIA_LOGIN_SHELL (ENROOT_LOGIN_SHELL, which a site's enroot.conf sets): the container's
    shell runs as a login shell, so /etc/profile and /etc/profile.d (module setups, conda) apply.
    Off by default (docs/runtime.md)."""
    profile_d = workspace.root / "profile.d"
    profile_d.mkdir()
    (profile_d / "site.sh").write_text("export FROM_PROFILE=sourced\n")
    command = (f"--mount={profile_d}:/etc/profile.d:none:bind,ro", str(images["debian"]),
               "sh", "-c", 'echo "${FROM_PROFILE:-none} $0"')
    assert output(workspace, *command, ENROOT_LOGIN_SHELL="yes") == "sourced sh\n"
    assert output(workspace, *command) == "none sh\n"
    assert output(workspace, *command, HYDRIA_LOGIN_SHELL="y", ENROOT_LOGIN_SHELL="n") == "sourced sh\n"


def test_what_a_command_makes_or_removes_it_says_in_one_line_unless_quiet(images: dict[str, Path],
                                                                          workspace: Workspace) -> None:
    said = {
        ("create", "-n", "made", str(images["busybox"])): f"Container made created from {images['busybox']}",
        ("export", "-o", "made.sqsh", "made"): f"Image written to {workspace.out / 'made.sqsh'}",
        ("bundle", "-o", "made.run", str(images["busybox"])): f"Bundle written to {workspace.out / 'made.run'}",
        ("remove", "-f", "made"): "Container made removed",
    }
    for arguments, line in said.items():
        result = workspace.run(*arguments)
        assert result.returncode == 0 and f"[INFO] {line}\n" in result.stderr, (arguments, result.stderr)
    for arguments in said:
        again = ["-f"] if arguments[0] in ("export", "bundle") else []  # over what the first round wrote
        quiet = workspace.run(arguments[0], "-q", *again, *arguments[1:])
        assert quiet.returncode == 0 and quiet.stderr == "", (arguments, quiet.stderr)
