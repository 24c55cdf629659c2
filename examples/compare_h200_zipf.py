"""Example: compare planners on the FAST H200 testbed with a Zipf(0.8) matrix, through the library API.

Run: ``.venv/bin/python examples/compare_h200_zipf.py`` (prints the nccl-tests-style table).
"""

from __future__ import annotations

from a2acc.model.topology import load_topology
from a2acc.studies.compare import format_table, run_compare


def main() -> None:
    topo = load_topology("dgx-h200-fast")
    rows = run_compare(topo, "zipf", [256 << 20], ["fast", "spreadout", "direct"], seed=1, skew=0.8)
    print(format_table(rows, f"# example: {topo.name}, zipf 0.8, 256 MiB per rank"))


if __name__ == "__main__":
    main()
