"""Datasets: prepare them once into results/data/<name>/, then draw batches statelessly.

`prepare_dataset` writes the files described in docs/ARTIFACTS.md ("Data files");
`load_prepared` reads and verifies them; `sample_batch`, `eval_batches` and `probe_inputs` turn
them into tensors as pure functions of their arguments; `DeviceSampler` builds the same training
batches on the device the model runs on.
"""
from .dataset_folder import DataError, PreparedData, load_prepared
from .device import DeviceSampler, eval_batches_on
from .prepare import prepare_dataset
from .sampling import BatchDraw, draw_batch, eval_batches, pin_memory, probe_inputs, sample_batch, to_device

__all__ = [
    "prepare_dataset", "load_prepared", "PreparedData", "DataError",
    "sample_batch", "eval_batches", "probe_inputs", "pin_memory", "to_device",
    "BatchDraw", "draw_batch", "DeviceSampler", "eval_batches_on",
]
