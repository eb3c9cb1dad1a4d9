"""One site's local training with 1 and with N torch threads: time, and whether the weights
are the same bit for bit (what ``resources.torch_threads`` above 1 would change).

One site of the default (Fashion-MNIST, the small CNN, 1,100 records drawn at random, Adam,
batch 64) trains ``--epochs`` local epochs from the seeded initial model, as a run's site
does (``clients.site_training.train_locally``), with each thread count in turn, ``--repeats``
times; prints CPU and wall seconds of each, the speed-up (median to median and pair by pair,
the first repeat left out), and the largest weight difference.

    python benchmarks/torch_threads.py [--threads 2] [--epochs 1] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.simulations.experiment_config import load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("configs/default.yaml"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--records", type=int, default=1_100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    config = load_config(args.config, [])
    data = load_dataset(config.data.name, root=config.data.root, options=config.data.options)
    assert data.y is not None
    task = make_task(config, DatasetMeta.of(data))
    rows = np.random.default_rng(0).choice(len(data.x), args.records, replace=False)
    torch.manual_seed(config.seed)
    start = {k: v.detach().clone() for k, v in task.make_model().state_dict().items()}
    trained: dict[int, dict[str, torch.Tensor]] = {}
    walls: dict[int, list[float]] = {1: [], args.threads: []}
    for _ in range(args.repeats):
        for threads in (1, args.threads):
            torch.set_num_threads(threads)
            cpu, wall = time.process_time(), time.perf_counter()
            out = train_locally(
                task,
                start,
                x=data.x[rows],
                y=data.y[rows],
                epochs=args.epochs,
                seed=config.seed,
                device=torch.device("cpu"),
            )
            walls[threads].append(time.perf_counter() - wall)
            print(
                f"{threads} thread(s): CPU {time.process_time() - cpu:.1f} s, "
                f"wall {walls[threads][-1]:.1f} s",
                flush=True,
            )
            trained.setdefault(threads, out.state_dict)
    # The first repeat of one thread pays the process's first use of the kernels and allocator.
    pairs = sorted(a / b for a, b in zip(walls[1][1:], walls[args.threads][1:], strict=True))
    if pairs:
        median = statistics.median(walls[1][1:]) / statistics.median(walls[args.threads][1:])
        print(
            f"{args.threads} threads against 1, repeats after the first: {median:.2f}x median "
            f"to median, {pairs[0]:.2f}-{pairs[-1]:.2f}x pair by pair"
        )
    one, many = trained[1], trained[args.threads]
    diff = max((one[k].double() - many[k].double()).abs().max().item() for k in one)
    print(f"weights with 1 and {args.threads} threads: largest difference {diff:.3g}")


if __name__ == "__main__":
    main()
