"""Claim 2: attention as a Markov chain, kernel fits, attention captures."""
