"""The numbers the reports show (the metric registry) and what they mean: formatting, caveats,
flag prose, plain language."""
