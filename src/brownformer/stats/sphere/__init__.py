"""Claim 1, and the sphere's geometry for claim 3: distances, fits, the spherical battery."""
