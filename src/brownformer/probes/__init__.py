"""Probes: capture token states, attention, weights and gradient noise during training, and turn
the capture store into trajectory files (docs/ARTIFACTS.md, "Trajectory files")."""
from brownformer.probes.extract import extract_trajectories
from brownformer.probes.layout import describe_layout
from brownformer.probes.recorder import ProbeRecorder
from brownformer.probes.schedule import capture_schedule

__all__ = ["capture_schedule", "ProbeRecorder", "extract_trajectories", "describe_layout"]
