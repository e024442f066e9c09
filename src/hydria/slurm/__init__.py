"""The Slurm face: pyxis's ``--container-*`` options and the per-step container lifecycle.
The SPANK shim (plugin/spank_hydria.c) calls ``hydria slurm validate|start|cleanup``."""
