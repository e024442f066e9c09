"""Built-in hooks that run in-process while a container starts (GPU access, ...)."""
