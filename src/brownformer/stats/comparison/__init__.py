"""Claim 4: censored times to a target, the time-to-target rule and its size."""
