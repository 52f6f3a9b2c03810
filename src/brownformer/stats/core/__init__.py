"""Estimators, bootstrap, pooling, gates, calibration: what every claim's rule is built from."""
