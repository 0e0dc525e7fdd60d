"""Chapters: one registry entry per notebook; summaries and chapter-specific helpers."""
