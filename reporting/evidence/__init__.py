"""What a consortium files: the evidence packs (PDF) and the release gate's verdict files."""
