"""The plugin's admin options (plugstack.conf arguments), with pyxis's keys and messages. Pure."""

from __future__ import annotations

from hydria.errors import HydriaError
from hydria.record import TYPE_CHECKING, Record
from hydria.slurm.step_options import FALSE, TRUE, device_names

if TYPE_CHECKING:
    from collections.abc import Sequence


class PluginConfig(Record):
    execute_entrypoint: bool = False
    container_scope: str = "global"  # or JOB_SCOPE
    sbatch_support: bool = True
    runtime_path: str = "/run/hydria-spank"
    use_enroot_load: bool = False
    importer: str = ""
    use_squashfuse: bool = True
    store_owner: str = ""  # the account that fills the image store when a step's image is missing
    # A node-local folder where store_owner keeps what steps read of the store's images, once per
    # node (container/store_trees.py); empty: each user keeps their own (read_cache.py)
    store_trees: str = ""
    container_device: str = ""  # CDI devices every container step gets unless it names its own


DEFAULT_PLUGIN = PluginConfig()
# The arguments the C shim reads itself (slurm/generated.py): before any step (sbatch_support), as
# root (runtime_path, store_owner, store_trees), in slurmd's job epilog (container_scope).
SHIM_READS = ("sbatch_support", "runtime_path", "container_scope", "store_owner", "store_trees")
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
    config = PluginConfig(**values)  # type: ignore[arg-type]
    if config.store_trees:
        _check_store_trees(config)
    return config


def _check_store_trees(config: PluginConfig) -> None:
    """store_trees=FOLDER: an absolute path that an overlay's lower layer can name, for store_owner."""
    from hydria.container.read_cache import path_problem

    if not config.store_owner:
        problem: str | None = "needs store_owner=ACCOUNT, the account that writes the trees"
    elif not config.store_trees.startswith("/"):
        problem = "is not an absolute path"
    else:
        problem = path_problem(config.store_trees)
    if problem:
        raise HydriaError(f"store_trees={config.store_trees}: {problem}")
