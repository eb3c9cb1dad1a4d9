"""Which guarantee covers a site's records (the ledger), the family-wise reading of failed
checks, what the server learns from updates."""
