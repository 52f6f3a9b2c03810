"""Tiny fake datasets (written with the data module's writer) and configs for the probe tests."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from brownformer.config import from_dict
from brownformer.data import load_prepared
from brownformer.data.dataset_folder import write_prepared

IMAGE_SHAPE = (1, 4, 4)  # 2x2 patches -> 4 patches + CLS = 5 tokens
N_CLASSES = 3
VOCAB = list("abcdefgh")

BASE = {
    "seeds": [0],
    "device": "cpu",
    "datasets": {"digits": {"source": "digits"}, "pydoc": {"source": "pydoc"}},
    "models": {
        "vit-pre": {"arch": "vit", "dataset": "digits", "ln": "pre", "d_model": 8, "n_layers": 2, "n_heads": 2,
                    "mlp_ratio": 2, "patch_size": 2},
        "vit-post": {"arch": "vit", "dataset": "digits", "ln": "post", "d_model": 8, "n_layers": 2, "n_heads": 2,
                     "mlp_ratio": 2, "patch_size": 2},
        "vit-none": {"arch": "vit", "dataset": "digits", "ln": "none", "d_model": 8, "n_layers": 2, "n_heads": 2,
                     "mlp_ratio": 2, "patch_size": 2},
        "lm-pre": {"arch": "lm", "dataset": "pydoc", "ln": "pre", "d_model": 8, "n_layers": 2, "n_heads": 2,
                   "mlp_ratio": 2, "seq_len": 6},
    },
    "optimizers": {"adamw": {"type": "adamw", "lr": 0.01, "weight_decay": 0.01},
                   "sgd": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
                   "kfac": {"type": "kfac-iterative", "lr": 0.05, "damping": 0.003, "inverse_every": 3}},
    "grid": [{"models": ["vit-pre", "vit-post", "vit-none", "lm-pre"], "optimizers": ["adamw", "sgd", "kfac"]}],
    "train": {"steps": 12, "batch_size": 8, "warmup_steps": 2, "eval_every": 6, "eval_batches": 1, "log_every": 1,
              "checkpoint_every": 100, "grad_clip": 1.0},
    "probes": {"n_inputs": 3, "seed": 5, "log_points": 4, "linear_every": 4, "noise_every": 3, "noise_samples": 3,
               "noise_large_batch": 16},
}


def make_config(**sections):
    """The tiny test config; keyword arguments update top-level sections (e.g. probes={...})."""
    raw = copy.deepcopy(BASE)
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    return from_dict(raw, source="test")


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("data") / "digits"
    splits = {name: {"x": rng.standard_normal((n, *IMAGE_SHAPE)).astype(np.float32),
                     "y": rng.integers(0, N_CLASSES, n).astype(np.int64)}
              for name, n in (("train", 40), ("val", 10), ("test", 10))}
    write_prepared(out, splits, {"dataset": "digits", "source": "fake", "kind": "image", "split_seed": 0,
                                 "n_classes": N_CLASSES, "image_shape": list(IMAGE_SHAPE)})
    return out


@pytest.fixture(scope="session")
def text_dir(tmp_path_factory) -> Path:
    rng = np.random.default_rng(1)
    out = tmp_path_factory.mktemp("data") / "pydoc"
    splits = {name: {"x": rng.integers(0, len(VOCAB), n).astype(np.int64)}
              for name, n in (("train", 400), ("val", 60), ("test", 60))}
    write_prepared(out, splits, {"dataset": "pydoc", "source": "fake", "kind": "text", "split_seed": 0,
                                 "vocab": VOCAB, "vocab_size": len(VOCAB)})
    return out


@pytest.fixture(scope="session")
def image_data(image_dir):
    return load_prepared(image_dir)


@pytest.fixture(scope="session")
def text_data(text_dir):
    return load_prepared(text_dir)


@pytest.fixture(scope="session")
def config_of():
    """make_config as a fixture (tests import nothing from conftest under --import-mode=importlib)."""
    return make_config
