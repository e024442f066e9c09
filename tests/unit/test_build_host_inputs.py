"""What the host gives a build's steps (imagebuild/host_inputs.py): each form users write is read
as it says, and each mistake is a clear error naming the item, never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from hydria.errors import UsageError
from hydria.imagebuild import host_inputs
from hydria.imagebuild.dockerfile import DockerfileError, parse_trigger
from hydria.imagebuild.host_inputs import CA_TARGET, CA_VARIABLES, HostInputs, Secret
from hydria.imagebuild.sandbox import RunMount
from hydria.imagebuild.steps import file_mounts, keyed_environment, keyed_mounts, secret_variables


def test_secrets_from_files_and_variables(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    found = host_inputs.secrets([f"id=token,src={token}", f"id=other,source={token},type=file", "id=env,env=TOKEN"],
                                {"TOKEN": "v"})
    assert found == {"token": Secret(path=str(token)), "other": Secret(path=str(token)), "env": Secret(value="v")}
    copy = tmp_path / "copy"
    found["env"].write(str(copy), 0o440)
    assert copy.read_text() == "v" and copy.stat().st_mode & 0o777 == 0o440


@pytest.mark.parametrize(("item", "said"), [
    ("id=x", "not a secret hydria build takes"),
    ("src=/etc/hostname", "not a secret hydria build takes"),
    ("id=x,src=/etc/hostname,env=TOKEN", "not a secret hydria build takes"),
    ("id=x,src=/etc/hostname,mode=0400", "not a secret hydria build takes"),
    ("id=x,type=ssh,src=/etc/hostname", "not a secret hydria build takes"),
    ("id=x,src=/nonexistent", "/nonexistent is not a file you can read"),
    ("id=x,src=/etc", "/etc is not a file you can read"),
    ("id=x,env=UNSET", "the variable UNSET is not set"),
])
def test_a_secret_users_get_wrong_is_named(item: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        host_inputs.secrets([item], {})


def test_a_secret_id_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the id x is given twice"):
        host_inputs.secrets(["id=x,env=A", "id=x,env=A"], {"A": "1"})


def test_volumes(tmp_path: Path) -> None:
    assert host_inputs.volumes([f"{tmp_path}:/wheels:ro", f"{tmp_path}/:/data/"]) == (
        RunMount("bind", "/wheels", str(tmp_path), writable=False), RunMount("bind", "/data", str(tmp_path), writable=True))
    for wrong in ("/tmp", "/tmp:relative", f"{tmp_path}:/x:rx", ":/x"):
        with pytest.raises(UsageError, match="not HOST:CONTAINER"):
            host_inputs.volumes([wrong])
    with pytest.raises(UsageError, match="/nonexistent does not exist"):
        host_inputs.volumes(["/nonexistent:/x"])


def test_the_ca_bundle_and_proxies_reach_the_environment_but_not_the_key(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("PEM")
    proxies = host_inputs.proxies({"https_proxy": "http://p:3128", "HOME": "/root", "NO_PROXY": "a"},
                                  {"NO_PROXY": "b", "OTHER": "x"})
    assert proxies == {"https_proxy": "http://p:3128", "NO_PROXY": "b"}
    host = HostInputs(ca_bundle=host_inputs.ca_bundle(str(bundle)), proxies=proxies)
    environment = host.environment()
    assert {environment[name] for name in CA_VARIABLES} == {CA_TARGET} and environment["NO_PROXY"] == "b"
    assert host.mounts() == (RunMount("bind", CA_TARGET, str(bundle)),)
    assert keyed_environment({**environment, "PATH": "/bin"}) == [("PATH", "/bin")]
    assert host_inputs.ca_bundle("") is None and HostInputs().environment() == {} and HostInputs().mounts() == ()
    with pytest.raises(UsageError, match="HYDRIA_BUILD_CA_BUNDLE /nonexistent is not a file you can read"):
        host_inputs.ca_bundle("/nonexistent")


def test_a_secret_is_keyed_by_its_id_and_place_not_its_copy() -> None:
    first = RunMount("secret", "/run/secrets/x", "/scratch/1/secrets/0", options=("x", "400", ""))
    second = first._replace(source="/scratch/2/secrets/0")
    assert keyed_mounts([first]) == keyed_mounts([second]) != keyed_mounts([first._replace(target="/x")])


def test_a_secret_as_a_variable_is_the_steps_alone_and_no_file() -> None:
    as_variable = RunMount("secret", "", None, options=("token", "400", "TOKEN"))
    as_file = RunMount("secret", "/run/secrets/key", "/scratch/secrets/0", options=("key", "400", ""))
    secrets = {"token": Secret(value="t0ken"), "key": Secret(value="k")}
    run = parse_trigger("RUN --mount=type=secret,id=token,env=TOKEN true", "Dockerfile:2")
    assert secret_variables(run, [as_variable, as_file], secrets) == {"TOKEN": "t0ken"}
    with pytest.raises(DockerfileError, match="Dockerfile:2: RUN: .*the secret token holds a NUL byte"):
        secret_variables(run, [as_variable], {"token": Secret(value="t0\0ken")})
    assert file_mounts([as_variable, as_file]) == [as_file]
    assert keyed_mounts([as_variable]) != keyed_mounts([as_variable._replace(options=("token", "400", "OTHER"))])
