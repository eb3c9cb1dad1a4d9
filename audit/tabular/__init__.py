"""Tabular modality of the audit: MST generator, real-vs-synthetic filter, gradient boosting.

``audit.tabular.generators`` registers the ``mst`` generator and ``audit.tabular.classifier``
the ``tabular`` membership classifier (see :mod:`audit.panoramia.components`).
"""
