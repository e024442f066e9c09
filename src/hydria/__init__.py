"""hydria: unprivileged containers from Docker/OCI images for HPC and AI clusters."""

__version__ = "0.1.0"
