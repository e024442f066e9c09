"""pyxis's option rules, as hydria's Slurm face applies them."""

from __future__ import annotations

import pytest

from hydria.runtime.fstab import MountEntry
from hydria.slurm.plugin_config import parse_plugin_config
from hydria.slurm.step_options import OptionError, mount_entry, parse


def test_repeats_same_value_ok_different_value_error() -> None:
    assert parse(["--container-image=a", "--container-image=a"], {}).image == "a"
    with pytest.raises(OptionError, match="--container-image specified multiple times"):
        parse(["--container-image=a", "--container-image=b"], {})


def test_boolean_pairs() -> None:
    assert parse(["--container-image=a", "--no-container-mount-home"], {}).mount_home is False
    with pytest.raises(OptionError, match="both --container-writable and --container-readonly were specified"):
        parse(["--container-writable", "--container-readonly"], {})


def test_environment_defaults_lose_to_the_command_line() -> None:
    env = {"HYDRIA_CONTAINER_IMAGE": "env-image", "HYDRIA_CONTAINER_WRITABLE": "1",
           "HYDRIA_CONTAINER_REMAP_ROOT": "maybe", "HYDRIA_CONTAINER_NAME": "n:no_exec"}
    options = parse([], env)
    assert (options.image, options.writable, options.remap_root) == ("env-image", True, None)
    assert (options.name, options.name_flag) == ("n", "no_exec")
    assert parse(["--container-image=cli", "--container-readonly"], env).image == "cli"
    assert parse(["--container-readonly"], env).writable is False


@pytest.mark.parametrize("prefix", ["HYDRIA_CONTAINER_", "PYXIS_CONTAINER_"])
def test_pyxis_names_and_false_values(prefix: str) -> None:
    options = parse([], {f"{prefix}IMAGE": "img", f"{prefix}MOUNTS": "/a:/b", f"{prefix}WORKDIR": "/w",
                         f"{prefix}MOUNT_HOME": "0", f"{prefix}ENTRYPOINT_LOG": "1", f"{prefix}UNSHARE": "net"})
    assert (options.image, options.workdir, options.mount_home, options.entrypoint_log, options.unshare) == \
        ("img", "/w", False, True, ["net"])
    assert [m.target for m in options.mounts] == ["/b"]
    for suffix, value, writable in (("WRITABLE", "0", False), ("WRITABLE", "1", True), ("READONLY", "0", True),
                                    ("READONLY", "1", False)):
        assert parse([], {f"{prefix}IMAGE": "img", f"{prefix}{suffix}": value}).writable is writable
    assert parse(["--container-readonly"], {f"{prefix}READONLY": "0"}).writable is False


def test_hydrias_name_wins_over_pyxiss() -> None:
    assert parse([], {"HYDRIA_CONTAINER_IMAGE": "mine", "PYXIS_CONTAINER_IMAGE": "theirs"}).image == "mine"


def test_ignored_without_image_or_name() -> None:
    options = parse(["--container-workdir=/x", "--container-remap-root"], {})
    assert not options.enabled
    assert options.warnings == [
        "ignoring --container-workdir because neither --container-image nor --container-name is set",
        "ignoring --container-remap-root because neither --container-image nor --container-name is set"]


def test_mount_entries_as_pyxis_builds_them() -> None:
    assert mount_entry("/a:/b:ro+rprivate") == MountEntry("/a", "/b", "none", ("x-create=auto", "rbind", "ro", "rprivate"),
                                                         origin="--container-mounts")
    assert mount_entry("/a").target == "/a"
    assert mount_entry("/a:/b:").options == ("x-create=auto", "rbind")
    assert mount_entry("tmpfs:/t").fstype == "tmpfs"
    assert mount_entry("umount:/root").options == ("x-detach",)
    options = parse(["--container-image=i", "--container-mounts=/a:/b,/a:/b"], {})
    assert len(options.mounts) == 1  # an identical duplicate is dropped
    for bad in (":", "/tmp:", ":/x", "/a:/b:c:d"):
        with pytest.raises(OptionError, match="invalid format"):
            mount_entry(bad)


def test_env_and_unshare_lists() -> None:
    assert parse(["--container-image=i", "--container-env=A,B,A"], {}).env == ["A", "B"]
    assert parse(["--container-image=i", "--container-unshare=net,uts"], {}).unshare == ["net", "uts"]
    with pytest.raises(OptionError, match="empty namespace argument"):
        parse(["--container-unshare=net,"], {})
    with pytest.raises(OptionError, match="--container-image: argument required"):
        parse(["--container-image="], {})


def test_plugin_config() -> None:
    config = parse_plugin_config(["execute_entrypoint=yes", "container_scope=job"])
    assert config.execute_entrypoint and config.container_scope == "job"
    with pytest.raises(Exception, match="unknown configuration option: colour=blue"):
        parse_plugin_config(["colour=blue"])
    with pytest.raises(Exception, match="execute_entrypoint: invalid value: Yes"):
        parse_plugin_config(["execute_entrypoint=Yes"])


def test_the_shims_declarations_are_generated_from_pythons() -> None:
    """Every step option and exit status is spelled once, in Python: the C shim includes the
    header install-plugin generates, and the option parser takes every option it declares."""
    from pathlib import Path

    from hydria.slurm import step
    from hydria.slurm.generated import header
    from hydria.slurm.step_options import PAIRS, SHIM_OPTIONS, VALUED, parse

    values = {"container-mounts": "/a:/b", "container-unshare": "net", "container-device": "example.com/x=a"}
    text = header()
    for option in SHIM_OPTIONS:
        assert f'OPT("{option.name}", ' in text
        if option.name in VALUED:
            assert option.arg is not None
            parse([f"--{option.name}={values.get(option.name, 'x')}"], {})
        else:
            assert option.name in PAIRS or option.name == "container-entrypoint-log"
            parse([f"--{option.name}"], {})
    for name in ("DISABLED_STATUS", "ATTACH_STATUS", "STORE_STATUS"):
        assert f"#define {name} {getattr(step, name)}\n" in text
    source = (Path(step.__file__).parent / "plugin" / "spank_hydria.c").read_text()
    assert '#include "hydria_generated.h"' in source and 'OPT("' not in source
    assert not any(f"#define {name} " in source for name in ("DISABLED_STATUS", "ATTACH_STATUS", "STORE_STATUS"))


def test_the_shim_spells_no_decision_of_the_python_side() -> None:
    """The job variables, pyxis's false values and the plugstack keys the shim reads come from the
    generated header; the tasks' environment rules (which variables, the PyTorch and PMIx names)
    come from `hydria slurm start`'s plan (slurm/task_env.py), not from the C."""
    from pathlib import Path

    from hydria.hooks.slurm_pmi import PMIX_SELECTIONS
    from hydria.slurm import step, task_env
    from hydria.slurm.generated import header
    from hydria.slurm.plugin_config import DEFAULT_PLUGIN, SHIM_READS, PluginConfig
    from hydria.slurm.step_options import FALSE, JOB_VARIABLE_PREFIXES

    text = header()
    assert f"#define JOB_VARIABLE_PREFIXES {', '.join(map(repr, JOB_VARIABLE_PREFIXES))}".replace("'", '"') in text
    assert f"#define FALSE_VALUES {', '.join(map(repr, FALSE))}".replace("'", '"') in text
    assert all(key in PluginConfig._fields and f'#define KEY_{key.upper()} "{key}"' in text for key in SHIM_READS)
    assert f'#define DEFAULT_RUNTIME_PATH "{DEFAULT_PLUGIN.runtime_path}"' in text
    import re

    code = re.sub(r"/\*.*?\*/", "", (Path(step.__file__).parent / "plugin" / "spank_hydria.c").read_text(),
                  flags=re.DOTALL)  # what the comments say is no decision
    spelled = [*JOB_VARIABLE_PREFIXES, *(f'"{value}"' for value in FALSE), *(f'"{key}' for key in SHIM_READS),
               DEFAULT_PLUGIN.runtime_path, *task_env.LOCALE, task_env.PYTORCH_IMAGE, *task_env.PYTORCH_RANKS,
               *task_env.PYTORCH_RANKS.values(), *PMIX_SELECTIONS, *PMIX_SELECTIONS.values(), task_env.PMIX_TASK,
               "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "OMP_NUM_THREADS", '"SLURM_"', '"PMIX_"', '"PMI_"']
    assert [word for word in spelled if word in code] == []


def test_the_shims_seccomp_filter_is_the_python_one() -> None:
    """Each machine's BPF program, as runtime/seccomp.py builds it, is in the generated header;
    the C spells no system call of it."""
    from pathlib import Path

    from hydria.runtime import seccomp
    from hydria.slurm import step
    from hydria.slurm.generated import MACHINE_MACROS, header

    lines = header().splitlines()
    assert set(MACHINE_MACROS) == set(seccomp.ARCHITECTURES)
    for machine, macro in MACHINE_MACROS.items():
        condition = next(number for number, line in enumerate(lines) if line.endswith(f"defined({macro})"))
        definition = lines[condition + 1].removeprefix("#define HYDRIA_SECCOMP_PROGRAM ")
        entries = [tuple(int(value, 0) for value in entry.strip(" {}").split(",")) for entry in definition.split("}, ")]
        assert entries == seccomp.program(machine)
    source = (Path(step.__file__).parent / "plugin" / "spank_hydria.c").read_text()
    assert "{HYDRIA_SECCOMP_PROGRAM}" in source and "SYS_setuid" not in source and "SYS_fchown" not in source


def test_the_plugstack_default_of_cdi_devices_is_checked_when_installed() -> None:
    import pytest

    from hydria.errors import HydriaError
    from hydria.slurm.plugin_config import parse_plugin_config

    assert parse_plugin_config(["container_device=nvidia.com/gpu=all,example.com/x=a"]).container_device == \
        "nvidia.com/gpu=all,example.com/x=a"
    with pytest.raises(HydriaError, match="container_device: invalid format: a,,b"):
        parse_plugin_config(["container_device=a,,b"])


@pytest.mark.parametrize(("arguments", "problem"), [
    (["store_trees=/var/tmp/trees"], "needs store_owner=ACCOUNT"),
    (["store_owner=store", "store_trees=var/tmp/trees"], "is not an absolute path"),
    (["store_owner=store", "store_trees=/var/tmp/a,b"], "holds ',', ':'"),
    (["store_owner=store", "store_trees=/var/tmp/a b"], "holds .* white space"),
])
def test_the_store_trees_folder_is_checked_when_installed(arguments: list[str], problem: str) -> None:
    from hydria.errors import HydriaError

    with pytest.raises(HydriaError, match=f"store_trees=.*: {problem}"):
        parse_plugin_config(arguments)
    assert parse_plugin_config(["store_owner=store", "store_trees=/var/tmp/trees"]).store_trees == "/var/tmp/trees"
