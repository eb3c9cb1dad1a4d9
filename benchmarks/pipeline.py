"""Time per stage of the whole pipeline with 2, 8 and 16 sites.

    python benchmarks/pipeline.py [--sites 2 8 16] [--records 700] [--rounds 2] [--quick]
        [--keep DIR] [--data-root DIR]

Each site holds the same number of records, so with enough Ray workers the FL and audit
wall times stay flat as sites are added; on a 2-core machine they grow about n/2. The
report stage should not grow much with sites (docs/performance.md has measured tables).
``--keep DIR`` keeps the run directories (e.g. to time ``panoramia-fl report`` on them).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.runner import run_experiment


def config_for(num_sites: int, args: argparse.Namespace) -> dict:
    return {
        "name": f"bench-{num_sites}",
        "data": {"name": args.dataset, "root": args.data_root},
        "partition": {"scheme": "iid", "num_sites": num_sites, "records_per_site": args.records},
        "fl": {"rounds": args.rounds, "local_epochs": 1},
        "resources": {"num_gpus": "auto", "audit_num_gpus": "auto"},
        "audit": {
            "enabled": True,
            "settings": {
                "quick": True,
                "generator": {"epochs": 3 if args.quick else 20},
                "helper_epochs": 2 if args.quick else 5,
            },
        },
    }


def audit_stage_means(layout: RunLayout) -> dict[str, float]:
    stages: dict[str, list[float]] = {}
    for path in sorted(layout.audit_files().values()):
        result = json.loads(path.read_text()).get("result") or {}
        for stage, seconds in (result.get("timings") or {}).items():
            stages.setdefault(stage, []).append(seconds)
    return {k: float(np.mean(v)) for k, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--records", type=int, default=700, help="records per site")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--data-root", type=Path, help="the dataset's folder (data.root)")
    parser.add_argument("--quick", action="store_true", help="tiny generator/helper budgets")
    parser.add_argument("--keep", type=Path, help="keep the run directories under this folder")
    args = parser.parse_args()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(f"device: {device}; torch threads per site: 1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parent = args.keep or Path(tmp)
        for n in args.sites:
            run_dir = parent / f"sites-{n}"
            t0 = time.time()
            outcome = run_experiment(validate_config(config_for(n, args)), run_dir)
            wall = time.time() - t0
            rows.append((n, outcome.timings, audit_stage_means(outcome.layout), wall))
    # Every stage the runner timed (data, reference models, FL + audit phases, report), in
    # the runner's order, then the audit's own stages (mean per site).
    run_stages = [k for k in rows[0][1] if k != "total_s"] if rows else []
    stage_names = sorted({s for _, _, stages, _ in rows for s in stages})
    head = ["sites", *run_stages, "wall_s"] + [f"audit:{s}" for s in stage_names]
    print("\t".join(head))
    for n, timings, stages, wall in rows:
        cells = [str(n), *(f"{timings.get(k, float('nan')):.1f}" for k in run_stages)]
        cells.append(f"{wall:.1f}")
        cells += [f"{stages.get(s, float('nan')):.1f}" for s in stage_names]
        print("\t".join(cells))
    print("audit:<stage> = mean seconds per site inside its own process")


if __name__ == "__main__":
    main()
