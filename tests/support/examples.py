"""The specs behind the committed example snapshots under deploy/examples/ (regenerate with
``python -m tests.support.examples``)."""

from __future__ import annotations

from pathlib import Path

from domain import dump_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

EXAMPLES: dict[str, GeneratorSpec] = {
    "small": GeneratorSpec(brokers=6, disks_per_broker=3, partitions=60, idcs=("idc-a",), racks_per_idc=3,
                           seed=1, cluster="small"),
    "skewed-multi-idc": GeneratorSpec(brokers=24, disks_per_broker=4, partitions=800,
                                      idcs=("idc-a", "idc-b", "idc-c"), pools={"shared": 0.75, "payments": 0.25},
                                      dead_brokers=1, seed=7, cluster="skewed"),
}

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2] / "deploy" / "examples"
    for name, spec in EXAMPLES.items():
        (root / f"{name}.json").write_text(dump_snapshot(generate_snapshot(spec), indent=1) + "\n")
        print(f"wrote {root / f'{name}.json'}")
