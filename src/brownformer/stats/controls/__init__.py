"""Positive and negative controls: can each claim's rule say yes?."""
