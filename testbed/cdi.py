"""CDI specs for tests, in the form ``nvidia-ctk cdi generate`` writes (toolkit 1.14-1.17): YAML with
the spec's common edits (control device nodes, NVIDIA_VISIBLE_DEVICES=void, createContainer hooks
of ``nvidia-cdi-hook``, read-only binds of the driver's libraries) and one device per GPU name."""

from __future__ import annotations


def nvidia_form(*, common_nodes: list[str], hooks: list[tuple[str, list[str]]], libraries: list[str],
                devices: dict[str, list[str]]) -> str:
    """``hooks``: (path, args) of createContainer hooks; ``devices``: name -> device node paths."""
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:"]
    lines += [f"  - path: {node}" for node in common_nodes]
    lines += ["  env:", "  - NVIDIA_VISIBLE_DEVICES=void", "  hooks:"]
    for path, args in hooks:
        lines += ["  - args:", *(f"    - {arg}" for arg in args), "    hookName: createContainer", f"    path: {path}"]
    lines.append("  mounts:")
    for library in libraries:
        lines += [f"  - containerPath: {library}", f"    hostPath: {library}", "    options:",
                  *(f"    - {option}" for option in ("ro", "nosuid", "nodev", "bind"))]
    lines.append("devices:")
    for name, nodes in devices.items():
        lines += ["- containerEdits:", "    deviceNodes:", *(f"    - path: {node}" for node in nodes),
                  f"  name: {name!r}" if name.isdigit() else f"  name: {name}"]
    lines.append("kind: nvidia.com/gpu")
    return "\n".join(lines) + "\n"
