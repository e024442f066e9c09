"""The plugin's admin options (plugstack.conf arguments), with pyxis's keys and messages. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from hydria.errors import HydriaError
from hydria.record import Record
from hydria.slurm.step_options import FALSE, TRUE, device_names


class PluginConfig(Record):
    execute_entrypoint: bool = False
    container_scope: str = "global"  # or JOB_SCOPE
    sbatch_support: bool = True
    runtime_path: str = "/run/hydria-spank"
    use_enroot_load: bool = False
    importer: str = ""
    use_squashfuse: bool = True
    store_owner: str = ""  # the account that fills the image store when a step's image is missing
    container_device: str = ""  # CDI devices every container step gets unless it names its own


DEFAULT_PLUGIN = PluginConfig()
# The arguments the C shim reads itself (slurm/generated.py): before any step (sbatch_support), as
# root (runtime_path, store_owner), in slurmd's job epilog (container_scope).
SHIM_READS = ("sbatch_support", "runtime_path", "container_scope", "store_owner")
JOB_SCOPE = "job"  # container_scope=job: named containers are removed when the job ends


def parse_plugin_config(arguments: Sequence[str]) -> PluginConfig:
    """Raises HydriaError for an unknown key or a bad value."""
    values: dict[str, object] = {}
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key not in PluginConfig._field_defaults:
            raise HydriaError(f"unknown configuration option: {argument}")
        default = PluginConfig._field_defaults[key]
        if isinstance(default, bool):
            if value not in TRUE + FALSE:
                raise HydriaError(f"{key}: invalid value: {value}")
            values[key] = value in TRUE
        elif key == "container_scope" and value not in ("global", JOB_SCOPE):
            raise HydriaError(f"{key}: invalid value: {value}")
        else:
            if key == "container_device":
                device_names(value, key)  # raises for a malformed list
            values[key] = value
    return PluginConfig(**values)  # type: ignore[arg-type]
