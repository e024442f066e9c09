"""The container runtime: namespaces, mounts, environment, hooks, and starting the program."""
