"""Image modality: class-conditional generators (cgan, vae), the real-vs-synthetic filter and
the membership classifier registered for ``modality="image"``."""

from audit.image import classifier, generators  # noqa: F401  (registration side effects)
