"""Evaluation: metrics (pure functions), run folders, runners and reports."""
