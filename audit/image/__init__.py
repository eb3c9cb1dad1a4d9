"""Image modality: class-conditional generators (cgan, vae), the real-vs-synthetic filter and
the membership classifier for ``modality="image"`` (registered in
:mod:`audit.panoramia.components`)."""
