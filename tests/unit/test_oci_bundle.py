"""An OCI bundle's config.json as hydria oci run reads it (hydria.oci.bundle): each field done as
the runtime specification says, or refused with an error that names it."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hydria.oci.bundle import load
from hydria.oci.fields import BundleError

UID, GID = 1000, 1000


def write(bundle: Path, config: dict[str, Any]) -> Path:
    (bundle / "rootfs").mkdir(exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def minimal(**changes: Any) -> dict[str, Any]:
    return {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["true"]}, **changes}


def test_a_runc_style_config_is_read_as_it_says(tmp_path: Path) -> None:
    config = minimal(
        process={"args": ["python", "train.py"], "env": ["PATH=/bin", "A=1", "PATH=/usr/bin:/bin"], "cwd": "/work",
                 "user": {"uid": 0, "gid": 0, "umask": 18}, "terminal": True, "noNewPrivileges": True,
                 "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 4096}]},
        root={"path": "rootfs", "readonly": True}, hostname="box", annotations={"org.example": "x"},
        linux={"namespaces": [{"type": "pid"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"},
                              {"type": "cgroup"}],
               "uidMappings": [{"containerID": 0, "hostID": UID, "size": 1}],
               "gidMappings": [{"containerID": 0, "hostID": GID, "size": 1}]},
        mounts=[{"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "ro", "nosuid"]},
                {"destination": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": ["size=64m"]}])
    container = load(str(write(tmp_path, config)), UID, GID)
    assert container.rootfs == str(tmp_path / "rootfs") and container.readonly
    assert container.args == ["python", "train.py"] and container.cwd == "/work"
    assert container.env == {"A": "1", "PATH": "/usr/bin:/bin"}  # the last value, as Slurm 22.05 appends the step's
    assert container.as_root and container.umask == 18 and container.hostname == "box"
    assert container.rlimits[0].resource == resource.RLIMIT_NOFILE and container.rlimits[0].hard == 4096
    assert container.namespaces == {"pid", "uts"}
    assert [(m.source, m.target, m.fstype, m.options) for m in container.mounts] == [
        ("/srv/data", "/data", "none", ("x-create=auto", "rbind", "ro", "nosuid")),
        ("tmpfs", "/scratch", "tmpfs", ("x-create=dir", "size=64m"))]


def test_the_callers_own_ids_run_as_the_caller(tmp_path: Path) -> None:
    container = load(str(write(tmp_path, minimal(process={"args": ["id"], "user": {"uid": UID, "gid": GID}}))),
                     UID, GID)
    assert not container.as_root and container.cwd == "/" and container.namespaces == frozenset()


@pytest.mark.parametrize(("config", "message"), [
    (minimal(ociVersion="0.9"), "ociVersion '0.9' is not a version 1"),
    (minimal(hooks={"prestart": []}), "hooks is a field hydria does not do"),
    (minimal(root={"path": "elsewhere"}), "root.path {bundle}/elsewhere is not a folder"),
    (minimal(root=None), "root is missing"),
    (minimal(process={"args": []}), "process.args is empty"),
    (minimal(process={"args": ["x", 1]}), "process.args[1] is not a string"),
    (minimal(process={"args": ["x"], "capabilities": {"bounding": ["CAP_NOPE"]}}),
     "process.capabilities.bounding[0] 'CAP_NOPE' is no Linux capability"),
    (minimal(process={"args": ["x"], "capabilities": {"effective": ["CAP_KILL"]}}),
     "process.capabilities.effective has CAP_KILL, which the permitted set lacks"),
    (minimal(process={"args": ["x"], "capabilities": {"permitted": ["CAP_KILL"], "ambient": ["CAP_KILL"]}}),
     "process.capabilities.ambient has CAP_KILL, which the inheritable set lacks"),
    (minimal(process={"args": ["x"], "capabilities": {"all": []}}), "process.capabilities.all is no capability set"),
    (minimal(process={"args": ["x"], "noNewPrivileges": False}), "process.noNewPrivileges is not true"),
    (minimal(process={"args": ["x"], "env": ["NOVALUE"]}), "process.env[0] 'NOVALUE' is not NAME=VALUE"),
    (minimal(process={"args": ["x"], "cwd": "work"}), "process.cwd 'work' is not an absolute path"),
    (minimal(process={"args": ["x"], "user": {"uid": 5}}), "process.user.uid 5: a container runs as its caller"),
    (minimal(process={"args": ["x"], "user": {"uid": 0, "gid": GID}}), "uid and gid of two accounts"),
    (minimal(process={"args": ["x"], "user": {"additionalGids": [27]}}), "process.user.additionalGids"),
    (minimal(process={"args": ["x"], "rlimits": [{"type": "RLIMIT_BOGUS", "soft": 1, "hard": 1}]}),
     "process.rlimits[0].type 'RLIMIT_BOGUS' is no resource limit"),
    (minimal(hostname="box"), "hostname needs a uts namespace"),
    (minimal(linux={"sysctl": {"net.core.somaxconn": "1024"}}), "linux.sysctl is a field hydria does not do"),
    (minimal(linux={"resources": {"memory": {"limit": 1 << 30}}}),
     "linux.resources.memory: a Slurm task's limits are its job's"),
    (minimal(linux={"maskedPaths": ["proc/kcore"]}), "linux.maskedPaths[0] 'proc/kcore' is not an absolute path"),
    (minimal(linux={"seccomp": {}}), "linux.seccomp.defaultAction is missing"),
    (minimal(linux={"seccomp": {"defaultAction": "SCMP_ACT_NOTIFY"}}),
     "linux.seccomp.defaultAction 'SCMP_ACT_NOTIFY' is not an action hydria runs"),
    (minimal(linux={"seccomp": {"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/agent.sock"}}),
     "linux.seccomp.listenerPath is a field hydria does not do"),
    (minimal(linux={"seccomp": {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_VAX"]}}),
     "linux.seccomp.architectures[0] 'SCMP_ARCH_VAX' is no architecture"),
    (minimal(linux={"seccomp": {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_ABOUT"}]}]}}),
     "linux.seccomp.syscalls[0].args[0].op 'SCMP_CMP_ABOUT' is not one of"),
    (minimal(linux={"namespaces": [{"type": "network", "path": "/proc/1/ns/net"}]}), "linux.namespaces[0].path"),
    (minimal(linux={"namespaces": [{"type": "time"}]}), "linux.namespaces[0].type 'time' is a namespace"),
    (minimal(linux={"uidMappings": [{"containerID": 0, "hostID": 0, "size": 65536}]}),
     "linux.uidMappings[0] maps other IDs"),
    (minimal(mounts=[{"destination": "data", "type": "bind", "source": "/x"}]),
     "mounts[0].destination 'data' is not an absolute path"),
    (minimal(mounts=[{"destination": "/x", "type": "bind", "source": "/y", "options": ["bind", "size=1"]}]),
     "mounts[0].options: 'size=1' is no option of a bind mount"),
    (minimal(mounts=[{"destination": "/proc2", "type": "proc", "source": "proc"}]),
     "mounts[0].type 'proc' at /proc2"),
])
def test_what_hydria_does_not_do_is_refused_by_name(tmp_path: Path, config: dict[str, Any], message: str) -> None:
    with pytest.raises(BundleError) as raised:
        load(str(write(tmp_path, config)), UID, GID)
    assert message.format(bundle=tmp_path) in raised.value.message
    assert raised.value.message.startswith(f"{tmp_path / 'config.json'}:")


@pytest.mark.parametrize(("text", "message"), [
    ("{", "is no JSON"), ("[]", "holds [] where the OCI configuration's JSON object belongs"),
    ("null", "holds null where the OCI configuration's JSON object belongs"),
    ("[" * 2_000 + "]" * 2_000, "nests its JSON deeper than a config.json can be"),
    ("[" * 100_000 + "]" * 100_000, "nests its JSON deeper than a config.json can be"),
])
def test_a_file_that_is_no_config_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(BundleError) as raised:
        load(str(tmp_path), UID, GID)
    assert message in raised.value.message


@pytest.mark.parametrize(("changes", "message"), [
    ({"process": {"args": ["true"], "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 2**70, "hard": 2**70}]}},
     f"process.rlimits[0].soft {2**70} is larger than a limit can be"),
    ({"process": {"args": ["true"], "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 10, "hard": 5}]}},
     "process.rlimits[0].soft is above its hard limit"),
    ({"hostname": "h" * 10_000, "linux": {"namespaces": [{"type": "uts"}]}},
     "hostname is 10000 characters long: a host name has at most 64 bytes"),
    ({"process": {"args": ["true"], "env": [f"V{n}=x" for n in range(200_000)]}},
     "process.env has 200000 entries, more than the 10000 hydria takes"),
    ({"process": {"args": ["true"], "env": ["V=" + "x" * 5_000_000]}},
     "process.env takes more than the"),
])
def test_a_value_beyond_what_the_system_takes_is_refused_by_name(tmp_path: Path, changes: dict[str, Any],
                                                                  message: str) -> None:
    started = time.monotonic()
    with pytest.raises(BundleError) as raised:
        load(str(write(tmp_path, minimal(**changes))), UID, GID)
    assert message in raised.value.message
    assert time.monotonic() - started < 30  # linear: 200,000 entries took 86 s before


def test_an_unlimited_rlimit_is_the_systems_infinity(tmp_path: Path) -> None:
    limit = {"type": "RLIMIT_CORE", "soft": 0, "hard": 2**64 - 1}
    container = load(str(write(tmp_path, minimal(process={"args": ["true"], "rlimits": [limit]}))), UID, GID)
    assert (container.rlimits[0].soft, container.rlimits[0].hard) == (0, resource.RLIM_INFINITY)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(min_value=-2**80, max_value=2**80) | st.floats()
                     | st.text(max_size=80),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                     max_leaves=20)
_FIELDS = ("ociVersion", "root", "process", "mounts", "hostname", "linux", "annotations", "process.args",
           "process.env", "process.cwd", "process.user", "process.rlimits", "process.capabilities", "linux.namespaces",
           "linux.uidMappings", "linux.seccomp", "linux.maskedPaths", "root.path", "root.readonly")


@settings(max_examples=300, deadline=None)
@given(replaced=st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=4))
def test_any_shape_of_config_is_read_or_refused_by_name(replaced: dict[str, Any], tmp_path_factory: Any) -> None:
    """Fields of a valid config.json replaced by any JSON value: the bundle loads, or fails with a
    BundleError, never another exception."""
    config = minimal(process={"args": ["true"], "env": ["A=1"]}, linux={"namespaces": [{"type": "uts"}]})
    for field, value in replaced.items():
        top, _, below = field.partition(".")
        if below and isinstance(config.get(top), dict):
            config[top][below] = value
        elif not below:
            config[top] = value
    bundle = tmp_path_factory.mktemp("bundle")
    try:
        load(str(write(bundle, config)), UID, GID)
    except BundleError as e:
        assert e.message


def test_a_bundle_without_config_says_what_a_bundle_is(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as raised:
        load(os.fspath(tmp_path), UID, GID)
    assert "No such file or directory" in raised.value.message and "config.json" in (raised.value.hint or "")


PODMAN_CAPABILITIES = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_BIND_SERVICE",
                       "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT"]


def test_what_podman_writes_to_confine_its_process_is_read(tmp_path: Path) -> None:
    """The confining fields as rootless podman 4 writes them into every bundle (scrun hands it on):
    capabilities, an empty linux.resources, masked and read-only paths, its seccomp profile."""
    config = minimal(
        process={"args": ["sh"], "capabilities": {key: PODMAN_CAPABILITIES for key in ("bounding", "effective",
                                                                                       "permitted")}},
        linux={"resources": {}, "maskedPaths": ["/proc/kcore", "/sys/firmware"], "readonlyPaths": ["/proc/sys"],
               "seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
                           "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                           "syscalls": [{"names": ["read", "write", "no_such_call"], "action": "SCMP_ACT_ALLOW"},
                                        {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                                         "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
                                        {"names": ["bpf"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}})
    confinement = load(str(write(tmp_path, config)), UID, GID).confinement
    assert confinement.masked == ("/proc/kcore", "/sys/firmware") and confinement.readonly == ("/proc/sys",)
    assert confinement.capabilities is not None
    assert confinement.capabilities.bounding == sum(1 << n for n in (0, 1, 3, 4, 5, 10, 31, 6, 8, 7, 18))
    assert confinement.capabilities.inheritable == confinement.capabilities.ambient == 0
    assert confinement.seccomp_filter and len(confinement.seccomp_filter) % 8 == 0


def test_a_bundle_without_confining_fields_is_not_confined(tmp_path: Path) -> None:
    confinement = load(str(write(tmp_path, minimal())), UID, GID).confinement
    assert (confinement.masked, confinement.readonly, confinement.capabilities, confinement.seccomp_filter) == (
        (), (), None, b"")
