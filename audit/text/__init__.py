"""Text modality of the audit: the ``gpt2`` generator and the ``text`` membership classifier.

Importing this package registers both (see :mod:`audit.components`). The reference pool
(:mod:`audit.reference_pool`) works on text chunks unchanged: records are int64 token ids
``(n, T)`` without labels.
"""

from audit.text import classifier, generator  # noqa: F401  (registration side effects)
