"""The project's test bed: a local registry, test images built from Debian packages, test users."""
