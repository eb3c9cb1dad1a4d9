"""Each site's own report: its page, its files, where it stands in the consortium."""
