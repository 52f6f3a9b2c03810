"""`prepare_dataset`: one DatasetConfig -> results/data/<name>/{train,val,test}.npz + meta.json."""
from __future__ import annotations

import logging
from pathlib import Path

from . import images, text
from ..config import DatasetConfig
from .dataset_folder import DataError, write_prepared

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
IMAGE_SOURCES = ("digits", "cifar10")
TEXT_SOURCES = ("pydoc", "textfile")
AUGMENTABLE_SOURCES = ("cifar10",)  # flipping or shifting an 8x8 digit can change which digit it is


def prepare_dataset(cfg: DatasetConfig, out_dir: str | Path) -> dict:
    """Build the three splits of one dataset and write them atomically (see data.dataset_folder).

    Args:
        cfg: the dataset's config entry.
        out_dir: the dataset folder, e.g. results/data/<cfg.name>.

    Returns:
        The meta dict written to out_dir/meta.json.

    Raises:
        DataError: on a missing or corrupted input (the message says which file to put where),
            or a setting the source does not support.
    """
    if cfg.augment and cfg.source not in AUGMENTABLE_SOURCES:
        raise DataError(f"dataset {cfg.name!r}: `augment: true` is only supported for "
                        f"{list(AUGMENTABLE_SOURCES)}, not {cfg.source!r}")
    common = {"dataset": cfg.name, "source": cfg.source, "format_version": FORMAT_VERSION,
              "split_seed": cfg.split_seed, "val_fraction": cfg.val_fraction,
              "test_fraction": cfg.test_fraction, "limit_train": cfg.limit_train}
    if cfg.source in IMAGE_SOURCES:
        splits, extra = _image_splits(cfg)
        meta = {**common, "kind": "image", **extra}
        if cfg.source == "cifar10":
            meta["test_fraction"] = None  # the official test set is used instead
    elif cfg.source in TEXT_SOURCES:
        if cfg.source == "pydoc":
            corpus, origin = text.pydoc_corpus()
            description = text.PYDOC_DESCRIPTION
        else:
            corpus, origin = text.read_textfile(cfg.path)
            description = f"local UTF-8 text file {cfg.path}; character-level"
        splits, extra = text.text_splits(corpus, val_fraction=cfg.val_fraction,
                                         test_fraction=cfg.test_fraction, limit_train=cfg.limit_train)
        # The contiguous split uses no randomness; split_seed is kept for a uniform meta layout.
        meta = {**common, "kind": "text", "origin": origin, "description": description, **extra}
    else:
        raise DataError(f"dataset {cfg.name!r}: unknown source {cfg.source!r}; known: "
                        f"{list(IMAGE_SOURCES + TEXT_SOURCES)}")
    log.info("prepared %s (%s): %s", cfg.name, cfg.source, {k: len(v["x"]) for k, v in splits.items()})
    return write_prepared(out_dir, splits, meta)


def _image_splits(cfg: DatasetConfig) -> tuple[dict, dict]:
    if cfg.source == "digits":
        return images.digits_splits(val_fraction=cfg.val_fraction, test_fraction=cfg.test_fraction,
                                    split_seed=cfg.split_seed, limit_train=cfg.limit_train)
    return images.cifar10_splits(data_dir=cfg.data_dir, download=cfg.download,
                                 val_fraction=cfg.val_fraction, split_seed=cfg.split_seed,
                                 limit_train=cfg.limit_train)
