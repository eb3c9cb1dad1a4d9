"""Real sites: the apps Flower's Deployment Engine loads (``deployment.flower_apps``), the
files ``flwr run`` needs, a loopback consortium with TLS, and a local Ray cluster helper."""
