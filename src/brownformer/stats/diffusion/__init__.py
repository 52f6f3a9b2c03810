"""Claim 3: is a trajectory a Brownian motion? the battery, the rule, simulators, window reading."""
