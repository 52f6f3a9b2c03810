"""The statistics stage: reads trajectory and attention files, writes the per-run statistics, the cross-run summary
(claims.json) and the calibration table, by calling the pure statistics of brownformer.stats.

- stages.py: the `brownformer stats trajectory|attention|run|calibrate` stages as plain functions;
- run_stats.py: one run's trajectories -> one statistics JSON per file and the run's summary.json;
- attention_files.py: one attention capture read with its sidecar, features and weights;
- trajectory_io.py: a trajectory file and its sidecar, the calibration table, a file's fitted null;
- user_calibration.py: `stats trajectory --calibrate`, the rule calibrated at a user's array's shape;
- summary.py: every run's statistics -> summary.parquet, training_status.json, claims.json;
- chance_baseline.py: the chance level of a prepared dataset (read from its files).
"""
