"""What the ServerApp and the ClientApps agree on: both import it, it imports neither.

Also the user errors (:mod:`contracts.errors`) and the name registry
(:mod:`contracts.registry`) every package shares. Standard library only: the audit library
imports it without Flower or torch.
"""
