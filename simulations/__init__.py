"""Harness side of panoramia-fl: configs, datasets, partitioning, tasks, runs, sweeps, CLI."""
