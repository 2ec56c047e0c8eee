"""``make demo``: the foundation's demo — plan a rebalance of the skewed multi-IDC example offline.

Loads ``deploy/examples/skewed-multi-idc.json``, shows the imbalance, plans a disk-load rebalance,
checks it with the shared invariant checker and prints the before/after table. The plan is written
to ``out/demo/plan.json`` (Kafka's reassignment JSON inside).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from controlplane.domain import check_plan, dump_plan
from controlplane.files import read_snapshot, write_atomic
from controlplane.report import plan_table, snapshot_table, violations_table
from planners.disk_balance import plan_rebalance

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "deploy" / "examples" / "skewed-multi-idc.json"


def main(out_dir: Path = ROOT / "out" / "demo") -> int:
    """Run the demo; returns the process exit code (0 when the plan is valid)."""
    console = Console()
    snapshot = read_snapshot(EXAMPLE)
    console.rule("Guardian demo: disk-aware rebalance of a skewed multi-IDC cluster")
    console.print(snapshot_table(snapshot))
    plan = plan_rebalance(snapshot)
    violations = check_plan(snapshot, plan)
    if violations:
        console.print(violations_table(violations))
        return 1
    console.print(plan_table(plan))
    for note in plan.notes:
        console.print(f"note: {note}", markup=False)
    target = out_dir / "plan.json"
    write_atomic(target, dump_plan(plan))
    console.print(f"valid plan written to {target} (feed its 'reassignment' member to "
                  "kafka-reassign-partitions.sh, or run `guardian plan validate`)", markup=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
