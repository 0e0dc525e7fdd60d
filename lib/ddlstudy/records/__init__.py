"""Records: tidy CSV tables with meta.json, resume digests and markers, the committed reference
records."""
