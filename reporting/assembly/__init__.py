"""A run directory read into typed inputs and the typed report, with its reproducibility manifest
and file writers."""
