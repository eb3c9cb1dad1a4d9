"""Every table and section of the reports, declared once and rendered to Markdown and HTML."""
