"""``hydria push`` and ``hydria build --push`` as the unprivileged test user, into the local
registry (and through an authenticating front of it): pulled back by hydria and by skopeo, blobs
the registry has never sent twice."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from testbed.authproxy import AuthProxy
from testbed.cosign import Key
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


def test_push_sign_writes_a_signature_that_a_site_policy_wanting_that_key_takes(
        debian: PublishedImage, registry: Registry, workspace: Workspace) -> None:
    """What a user builds and pushes with --sign passes, on another cluster, the policy that wants
    their key (its public half): the signature is cosign's (testbed/cosign.py reads the same)."""
    key = Key()
    private = workspace.out / "key.pem"
    private.write_bytes(key.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    os.chown(private, workspace.user.uid, workspace.user.gid)
    built(workspace, "-t", "signed:1", str(make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n"
                                                                                  "RUN echo signed > /s.txt\n"})))
    destination = f"docker://{registry.address}#lab/signed:1"
    said = pushed(workspace, "--sign", str(private), "signed:1", destination)
    assert f"as {registry.address}/lab/signed:1 (sha256-" in said
    pushed(workspace, "--sign", str(private), "signed:1", destination)  # again: the signature is there once
    etc = workspace.root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "lab.pub").write_bytes(key.public_pem)
    (etc / "policy.json").write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {
        f"{registry.address}/lab": [{"type": "sigstoreSigned", "keyPath": str(etc / "lab.pub")}]}}}))
    imported = workspace.run("import", "-o", "pulled.sqsh", destination)
    assert imported.returncode == 0 and f"signed by the key of {etc / 'lab.pub'}" in imported.stderr, imported.stderr
    digest = said.split("(sha256-")[1].split(".sig")[0]
    listed = httpx.get(f"http://{registry.address}/v2/lab/signed/manifests/sha256-{digest}.sig",
                       headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    assert len(listed["layers"]) == 1
    bad = workspace.run("push", "--sign", str(workspace.out / "pulled.sqsh"), "signed:1", destination)
    assert bad.returncode == 1 and "is no PEM private key" in bad.stderr
