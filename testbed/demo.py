"""The README's main job: a registry, a small image from Debian packages, import, start.

Each hydria step runs as the unprivileged user ``hydria-test``; a failing step ends the demo with
its exit status.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from testbed.oci import push
from testbed.recipes import get_image
from testbed.registry import Registry
from testbed.users import User, run_as

REPOSITORY, TAG = "hydria/busybox", "latest"


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run_demo() -> int:
    user = User.lookup("hydria-test")
    with tempfile.TemporaryDirectory(prefix="hydria-demo-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        _say("building the busybox image from the Debian package busybox-static")
        image = get_image("busybox", workdir)
        with Registry(workdir / "registry") as registry:
            _say(f"registry (Debian docker-registry) listening on {registry.address}")
            digest = push([image], registry.address, REPOSITORY, TAG, workdir)
            manifest = httpx.get(f"http://{registry.address}/v2/{REPOSITORY}/manifests/{TAG}",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
            manifest.raise_for_status()
            _say(f"registry serves {REPOSITORY}:{TAG} ({digest})")
            output = workdir / "out"
            output.mkdir(mode=0o777)
            output.chmod(0o777)
            image_file = output / "busybox.sqsh"
            uri = f"docker://{registry.address}#{REPOSITORY}:{TAG}"
            steps = [
                ["hydria", "import", "--output", str(image_file), uri],
                ["hydria", "start", str(image_file), "cat", "/etc/os-release"],
            ]
            for argv in steps:
                stop = _step(user, argv)
                if stop is not None:
                    return stop
    _say("done")
    return 0


def _step(user: User, argv: list[str]) -> int | None:
    """Run one hydria command as ``user``; None to go on, else the demo's exit status."""
    _say(f"as {user.name}: {shlex.join(argv)}")
    result = run_as(user, argv, env={"HYDRIA_ALLOW_HTTP": "y"})
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode == 0:
        return None
    _say(f"failed with exit status {result.returncode}")
    return result.returncode


if __name__ == "__main__":
    try:
        sys.exit(run_demo())
    except subprocess.CalledProcessError as e:
        print(f"[demo] {e}", file=sys.stderr)
        sys.exit(1)
