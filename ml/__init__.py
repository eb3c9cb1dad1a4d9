"""The ML domain: dataset loaders, models, torch tasks, site partitioning, input canaries,
and loading a saved global model. It knows nothing of Flower runs, reports or deployment."""
