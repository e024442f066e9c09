"""The report's records and how ``hydria doctor`` prints them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hydria.record import Record


class Check(Record):
    name: str
    status: str  # ok, warn, fail, skip
    detail: str
    fix: str = ""


class NodeReport(Record):
    node: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "ok": self.ok, "checks": [c._asdict() for c in self.checks]}

    def dumps(self) -> str:
        """Indented: ``--cluster`` reads it through srun, which splits long lines."""
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeReport:
        return cls(str(data["node"]), [Check(**c) for c in data["checks"]])


class ClusterReport(Record):
    nodes: list[NodeReport]
    step_ok: bool = True
    step_error: str = ""
    step_nodes: tuple[str, ...] = ()
    image: str | None = None

    @property
    def ok(self) -> bool:
        return self.step_ok and all(n.ok for n in self.nodes)

    def to_json(self) -> dict[str, object]:
        report: dict[str, object] = {"ok": self.ok, "nodes": [n.to_json() for n in self.nodes]}
        if self.image:
            report["container_step"] = {"image": self.image, "ok": self.step_ok, "nodes": list(self.step_nodes),
                                        "error": self.step_error}
        return report


def render(report: NodeReport) -> str:
    """The human table of a node report."""
    width = max(len(c.name) for c in report.checks)
    lines = [f"hydria doctor: {report.node}", ""]
    for check in report.checks:
        status = "FAIL" if check.status == "fail" else check.status
        lines.append(f"  {check.name:<{width}}  {status:<4}  {check.detail}")
        if check.fix and check.status in ("fail", "warn"):
            lines.append(f"  {'':<{width}}        fix: {check.fix}")
    lines += ["", summary(report.checks)]
    return "\n".join(lines)


def summary(checks: Sequence[Check]) -> str:
    """The table's last line: failures, else warnings and what they mean, else that all passed."""
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    if failed:
        return f"{failed} check(s) failed: what each names does not work here as things are; its fix line says what to do"
    if warned:
        return (f"all checks passed, with {warned} warning(s): containers start here, but what each warning names "
                "is slower, missing or will fail in the case it says; its fix line says how to mend it")
    return "all checks passed"


def render_cluster(report: ClusterReport) -> str:
    lines = []
    for node in report.nodes:
        failed = [c for c in node.checks if c.status == "fail"]
        lines.append(f"{node.node}: " + ("ok" if not failed else
                                         "FAIL: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)))
    if report.image:
        lines.append(f"a step in {report.image} on every node: " +
                     (f"ok ({', '.join(report.step_nodes)})" if report.step_ok else f"FAIL: {report.step_error}"))
    lines.append("all nodes passed" if report.ok else "some nodes failed")
    return "\n".join(lines)
