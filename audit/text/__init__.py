"""Text modality of the audit: the ``gpt2`` generator and the ``text`` membership classifier.

``audit.text.generator`` and ``audit.text.classifier`` register them (see
:mod:`audit.panoramia.components`). The reference pool
(:mod:`audit.panoramia.reference_pool`) works on text chunks unchanged: records are int64
token ids ``(n, T)`` without labels.
"""
