"""sbatch and salloc with the container options, on the real test cluster, as the test user:
the batch script itself runs in the container, salloc's options reach the job's steps, and the
interactive step (LaunchParameters=use_interactive_step) opens the shell inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import slurm

pytestmark = pytest.mark.integration


def write_script(submit: slurm.Submitter, name: str, text: str) -> Path:
    script = submit.workspace.out / name
    script.write_text(text)
    script.chmod(0o755)
    return script


def test_batch_script_runs_in_the_container(submit: slurm.Submitter, images: dict[str, Path]) -> None:
    data = submit.workspace.out / "data"
    data.mkdir()
    (data / "input").write_text("from the host\n")
    script = write_script(submit, "job.sh", f"""#!/bin/sh
#SBATCH --container-image={images['busybox']}
#SBATCH --container-mounts={data}:/data:ro
#SBATCH --output=job.out
head -1 /etc/os-release
cat /data/input
echo "script=$0"
id -u
exit 3
""")
    result = submit.run("sbatch", "--wait", str(script))
    assert result.returncode == 3, result.stderr  # sbatch --wait returns the script's status
    lines = (submit.workspace.out / "job.out").read_text().splitlines()
    assert lines[0] == 'PRETTY_NAME="hydria busybox test image"'
    assert lines[1] == "from the host"
    assert lines[2].startswith(f"script={slurm.ROOT}/spool/")  # bound read-only at the spool path
    assert lines[3] == str(submit.workspace.user.uid)


def test_batch_options_on_the_command_line(submit: slurm.Submitter, images: dict[str, Path]) -> None:
    submit.ok("sbatch", "--wait", "--output=wrap.out", f"--container-image={images['debian']}",
              "--container-workdir=/etc", "--wrap", "pwd; ls /opt/hydria-test")
    lines = (submit.workspace.out / "wrap.out").read_text().splitlines()
    assert lines[0] == "/etc"
    assert "data-hardlink.txt" in lines[1:]


def test_batch_without_options_runs_on_the_host(submit: slurm.Submitter) -> None:
    submit.ok("sbatch", "--wait", "--output=host.out", "--wrap", "test -d /work && echo host")
    assert (submit.workspace.out / "host.out").read_text() == "host\n"


@pytest.mark.parametrize(("option", "message"), [
    ("--container-mounts=mnt:/x", 'mount source must be a relative path, an absolute path, "tmpfs" or "umount"'),
    ("--container-save=/tmp/", "--container-save: target is a directory"),
    ("--container-name=:exec", "--container-name: empty name"),
])
def test_invalid_batch_options_fail_at_submission(submit: slurm.Submitter, images: dict[str, Path],
                                                  option: str, message: str) -> None:
    result = submit.run("sbatch", f"--container-image={images['busybox']}", option, "--wrap", "true")
    assert result.returncode != 0
    assert f"hydria: {message}" in result.stderr or message in result.stderr
    assert "Submitted batch job" not in result.stdout


def test_bad_image_fails_the_batch_job(submit: slurm.Submitter) -> None:
    result = submit.run("sbatch", "--wait", "--output=bad.out", "--container-image=./missing.sqsh", "--wrap", "true")
    assert result.returncode != 0
    assert "--container-image: no such file" in (submit.workspace.out / "bad.out").read_text()


def test_salloc_options_reach_the_steps(submit: slurm.Submitter, images: dict[str, Path]) -> None:
    out = submit.ok("salloc", f"--container-image={images['busybox']}", "sh", "-c",
                    "srun head -1 /etc/os-release; test -d /work && echo allocation-shell-on-host")
    assert out.splitlines() == ['PRETTY_NAME="hydria busybox test image"', "allocation-shell-on-host"]


def test_salloc_interactive_step_runs_in_the_container(submit: slurm.Submitter, images: dict[str, Path]) -> None:
    # salloc without a command starts `srun --pty $SHELL` (use_interactive_step); `script` gives it a terminal
    session = submit.run("script", "-qec", f"salloc --container-image={images['debian']}", "/dev/null",
                         input="test -e /opt/hydria-test/data-hardlink.txt && echo in-$((6*7)); exit 5\n",
                         SHELL="/bin/sh")
    assert "in-42" in session.stdout, session.stdout + session.stderr
    assert session.returncode == 5
