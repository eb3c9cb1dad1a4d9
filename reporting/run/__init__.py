"""The run's report files: report.json / .csv / .md / .html and each audited site's own."""
