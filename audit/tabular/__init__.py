"""Tabular modality of the audit: MST generator, real-vs-synthetic filter, gradient boosting.

Importing this package registers the ``mst`` generator and the ``tabular`` membership
classifier (see :mod:`audit.components`).
"""

from audit.tabular import classifier, generators  # noqa: F401  (registration side effects)
