"""Probe inputs for a pretrained model: fixed-length token windows of a text, or images.

Text (a file, or the project's pydoc corpus) is tokenised with the checkpoint's own tokenizer files
(no special tokens added) and cut into `n_inputs` non-overlapping windows of `n_tokens` tokens, evenly
spaced over the text. `--input-ids` gives the windows directly (a model saved without tokenizer
files). Images: `--images` (n, C, H, W) floats, or the digits dataset (8x8 grey digits in [0, 1],
resized bilinearly to the model's image_size, repeated over its channels, then mapped to [-1, 1] as
ViT image processors do). These inputs may be off-distribution for the model: the report says so.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .settings import DATASETS, DEFAULT_N_INPUTS, DEFAULT_N_TOKENS

log = logging.getLogger(__name__)

#: the files a Hugging Face tokenizer is loaded from (any one of them may be enough)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                    "spiece.model")

__all__ = ["InputSpec", "build_inputs", "DEFAULT_N_INPUTS", "DEFAULT_N_TOKENS", "DATASETS"]


@dataclass(frozen=True)
class InputSpec:
    """Where the probe inputs come from: exactly one of text, dataset, input_ids, images."""
    text: Path | None = None
    dataset: str | None = None
    input_ids: Path | None = None
    images: Path | None = None
    n_inputs: int = DEFAULT_N_INPUTS
    n_tokens: int = DEFAULT_N_TOKENS

    def __post_init__(self):
        given = [k for k in ("text", "dataset", "input_ids", "images") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one input source, not {given}")
        if self.dataset is not None and self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        if self.n_inputs < 1 or self.n_tokens < 2:
            raise ValueError(f"n_inputs must be >= 1 and n_tokens >= 2, got {self.n_inputs}, {self.n_tokens}")

    def describe(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def _load_npy(path: Path, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path}: cannot read as .npy ({exc})") from None


def _token_windows(ids: np.ndarray, n_inputs: int, n_tokens: int, source: str) -> np.ndarray:
    if ids.size < n_inputs * n_tokens:
        raise ValueError(f"{source}: {ids.size} tokens, fewer than n_inputs x n_tokens = {n_inputs * n_tokens}")
    starts = np.linspace(0, ids.size - n_tokens, n_inputs).astype(int)  # evenly spaced, non-overlapping
    return np.stack([ids[s:s + n_tokens] for s in starts])


def _tokenize(model_dir: Path, text: str, spec: InputSpec, source: str) -> np.ndarray:
    from transformers import AutoTokenizer
    if not any((Path(model_dir) / f).is_file() for f in _TOKENIZER_FILES):
        # checked first: without these files transformers may hand back a tokenizer that encodes nothing
        raise ValueError(f"{model_dir}: no tokenizer files (none of {list(_TOKENIZER_FILES)}); {source} needs the "
                         "checkpoint's own tokenizer: give --input-ids X.npy instead")
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{model_dir}: no usable tokenizer files ({type(exc).__name__}); "
                         "give --input-ids X.npy instead") from None
    # the tokenizer warns about texts longer than the model's context: we cut windows ourselves
    ids = np.asarray(tok(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int64)
    return _token_windows(ids, spec.n_inputs, spec.n_tokens, source)


def _text_ids(model_dir: Path, config, spec: InputSpec) -> np.ndarray:
    if spec.input_ids is not None:
        ids = _load_npy(spec.input_ids, "--input-ids")
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"--input-ids {spec.input_ids}: expected an int array (n_inputs, n_tokens), "
                             f"got {ids.dtype} {ids.shape}")
        ids = ids[: spec.n_inputs].astype(np.int64)
    elif spec.text is not None:
        try:
            text = Path(spec.text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--text {spec.text}: cannot read as UTF-8 ({exc})") from None
        ids = _tokenize(model_dir, text, spec, f"--text {spec.text}")
    elif spec.dataset in (None, "pydoc"):
        from brownformer.data.text import pydoc_corpus
        ids = _tokenize(model_dir, pydoc_corpus()[0], spec, "pydoc corpus")
    else:
        raise ValueError(f"--dataset {spec.dataset} holds images; this is a text model")
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab}) (the model's vocab_size), got [{ids.min()}, {ids.max()}]")
    limit = int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or 0)
    if limit and ids.shape[1] > limit:
        raise ValueError(f"{ids.shape[1]} tokens per input exceed the model's context of {limit}")
    return ids


def _digits(config, n: int) -> np.ndarray:
    from sklearn.datasets import load_digits
    x = load_digits().images[:n].astype(np.float32) / 16.0  # (n, 8, 8) in [0, 1]
    size = int(getattr(config, "image_size", 8))
    t = F.interpolate(torch.from_numpy(x)[:, None], size=(size, size), mode="bilinear", align_corners=False)
    t = t.repeat(1, int(getattr(config, "num_channels", 1)), 1, 1)  # (n, C, size, size)
    return ((t - 0.5) / 0.5).numpy()


def _images(config, spec: InputSpec) -> np.ndarray:
    if spec.images is not None:
        x = _load_npy(spec.images, "--images")[: spec.n_inputs]
        if x.ndim != 4 or not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"--images {spec.images}: expected a float array (n, channels, height, width), "
                             f"got {x.dtype} {x.shape}")
    elif spec.dataset in (None, "digits"):
        x = _digits(config, spec.n_inputs)
    else:
        raise ValueError(f"this is an image model: give --images X.npy or --dataset digits, not {spec.describe()}")
    C, size = int(getattr(config, "num_channels", x.shape[1])), int(getattr(config, "image_size", x.shape[-1]))
    if x.shape[1] != C or x.shape[2] != size or x.shape[3] != size:
        raise ValueError(f"images must be (n, {C}, {size}, {size}) for this model, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("images contain non-finite values")
    return x.astype(np.float32)


def build_inputs(model_dir: Path, config, modality: str, spec: InputSpec) -> torch.Tensor:
    """input_ids (B, n) int64 or pixel_values (B, C, H, W) float32 (module docstring).

    Raises:
        ValueError: missing tokenizer files, too short a text, ids outside the vocabulary, wrong image shape.
    """
    if modality == "image":
        if spec.text is not None or spec.input_ids is not None:
            raise ValueError("this is an image model: give --images X.npy or --dataset digits")
        return torch.from_numpy(_images(config, spec))
    if spec.images is not None:
        raise ValueError("this is a text model: give --text, --dataset pydoc or --input-ids")
    return torch.from_numpy(_text_ids(model_dir, config, spec))
