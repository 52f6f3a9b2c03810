"""brownformer: a reproducible replication of arXiv 2107.05264 and its iterative K-FAC."""
__version__ = "0.1.0"
__all__ = ["__version__"]
