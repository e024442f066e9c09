"""Where images come from: registries, OCI layouts and archives, docker archives, engines."""
