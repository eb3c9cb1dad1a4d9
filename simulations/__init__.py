"""The harness: experiment config, run directories, the simulated run, sweeps and the CLI."""
