"""``hydria push`` and ``hydria build --push`` as the unprivileged test user, into the local
registry (and through an authenticating front of it): pulled back by hydria and by skopeo, blobs
the registry has never sent twice."""

from __future__ import annotations

import json
import subprocess

import pytest

from testbed.authproxy import AuthProxy
from testbed.publish import PublishedImage
from testbed.registry import Registry
from testbed.workspace import Workspace
from tests.integration.test_build import base_of, built, make_context

pytestmark = pytest.mark.integration


def pushed(workspace: Workspace, *args: str) -> str:
    result = workspace.run("push", *args)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_a_built_image_is_pushed_pulled_back_and_pushed_again_in_no_time(
        debian: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN echo pushed > /pushed.txt\n"
                                                     'CMD ["cat", "/pushed.txt"]\n'})
    built(workspace, "-t", "app:1", str(context))
    destination = f"docker://{registry.address}#mine/app:1"
    first = pushed(workspace, "app:1", destination)
    # the base image's three layers are mounted from its repository; the new layer and the config are sent
    assert "2 blob(s) sent, 3 already there" in first
    again = pushed(workspace, "app:1", destination)
    assert "0 blob(s) sent, 5 already there" in again
    result = workspace.run("import", "-o", "pulled.sqsh", destination)
    assert result.returncode == 0, result.stderr
    assert workspace.run("start", str(workspace.out / "pulled.sqsh")).stdout == "pushed\n"
    inspected = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                                           f"docker://{registry.address}/mine/app:1"],
                                          capture_output=True, text=True, check=True).stdout)
    assert inspected["Layers"][:3] == json.loads(subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{base_of(debian)}"], capture_output=True, text=True,
        check=True).stdout)["Layers"]


def test_build_push_and_an_oci_layout_through_an_authenticating_registry(
        debian: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nCOPY a.txt /a.txt\n", "a.txt": "a\n"})
    with AuthProxy(registry.address) as proxy:
        destination = f"docker://{proxy.address}#private/app:2"
        refused = workspace.run("build", "--oci", "layout", "--push", destination, str(context))
        assert refused.returncode == 1 and "authentication anonymously" in refused.stderr
        assert "Traceback" not in refused.stderr
        workspace.write_credentials("machine 127.0.0.1 login ada password s3cret\n")
        built(workspace, "--push", destination, str(context))
        result = workspace.run("import", "-o", "private.sqsh", destination)
        assert result.returncode == 0, result.stderr
        assert workspace.run("start", str(workspace.out / "private.sqsh"), "cat", "/a.txt").stdout == "a\n"
        from_layout = pushed(workspace, f"oci://{workspace.out / 'layout'}", f"docker://{proxy.address}#private/copy:1")
        assert "sent" in from_layout


@pytest.mark.parametrize(("args", "message"), [
    (("nothing-built", "docker://127.0.0.1:1#x:1"), "Invalid argument: nothing-built"),
    (("x", "oci://somewhere"), "push to a registry, by tag"),
    (("x", "docker://127.0.0.1:1#x@sha256:" + "a" * 64), "push to a registry, by tag"),
])
def test_push_says_what_is_wrong(workspace: Workspace, args: tuple[str, ...], message: str) -> None:
    result = workspace.run("push", *args)
    assert result.returncode == 1 and message in result.stderr, result.stderr
