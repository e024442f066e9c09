"""What the site policy's signature check costs an import: ``hydria import`` of a signed image
whose blobs and image are already kept (the import is a hardlink: the check is all that is left
to cost), without a policy, with an accept-everything policy, and with a policy that wants a
cosign signature by a key (two more registry requests, the signature tag and its payload, and a verification; the referrers are asked only where no signature there passed). The start is never
checked: a policy is read by imports alone.

Run as root (it needs nothing else): python benchmarks/verify_bench.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.cosign import Key, push_signatures
from testbed.oci import push
from testbed.recipes import get_image
from testbed.registry import Registry

HYDRIA = str(Path(sys.executable).parent / "hydria")


def median_ms(argv: list[str], env: dict[str, str], runs: int, work: Path) -> float:
    times = []
    for run in range(runs):
        output = work / f"out-{run}.sqsh"
        started = time.perf_counter()
        subprocess.run([*argv, "-o", str(output), env["URI"]], env=env, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
        output.unlink()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hydria-verify-bench-") as tmp:
        work = Path(tmp)
        with Registry(work / "registry") as registry:
            image = get_image("busybox", work)
            digest = push([image], registry.address, "lab/app", "1", work)
            key = Key()
            push_signatures(registry.address, "lab/app", digest, [key.sign(digest, f"{registry.address}/lab/app:1")])
            (work / "key.pub").write_bytes(key.public_pem)
            policies = {
                "no policy": None,
                "insecureAcceptAnything": {"default": [{"type": "insecureAcceptAnything"}]},
                "sigstoreSigned (a key)": {"default": [{"type": "reject"}], "transports": {"docker": {
                    f"{registry.address}/lab": [{"type": "sigstoreSigned", "keyPath": str(work / "key.pub")}]}}},
            }
            rows = []
            for name, document in policies.items():
                etc = work / name.split()[0]
                etc.mkdir()
                if document is not None:
                    (etc / "policy.json").write_text(json.dumps(document))
                env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "HYDRIA_SYSCONF_PATH": str(etc),
                       "HYDRIA_CACHE_PATH": str(work / "cache"), "HYDRIA_ALLOW_HTTP": "y",
                       "URI": f"docker://{registry.address}#lab/app:1"}
                warm = work / "warm.sqsh"  # the first import of each keeps the image (the same cache for all)
                subprocess.run([HYDRIA, "import", "-q", "-o", str(warm), env["URI"]], env=env, check=True)
                warm.unlink()
                rows.append((name, median_ms([HYDRIA, "import", "-q"], env, options.runs, work)))
    base = rows[0][1]
    print(f"hydria import of a kept image (a hardlink), median of {options.runs}")
    for name, ms in rows:
        print(f"{name:<26} {ms:7.1f} ms  (+{ms - base:5.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
