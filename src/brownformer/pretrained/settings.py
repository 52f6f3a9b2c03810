"""The config's `pretrained:` block: name -> local model folder and input settings (schema-validated).

The schema checks the keys; this module checks what it cannot: each path holds a config.json (a
ConfigError naming the key otherwise), and turns an entry into `brownformer pretrained` arguments.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from brownformer.config import ConfigError

__all__ = ["pretrained_entries", "cli_arguments", "DATASETS", "DEFAULT_N_INPUTS", "DEFAULT_N_TOKENS"]

# Input defaults of `brownformer pretrained` (inputs.py); here, without torch, so that building the CLI's parser
# does not import torch (~2.7 CPU-s of every pipeline job that needs no torch)
DEFAULT_N_INPUTS = 8
DEFAULT_N_TOKENS = 64
DATASETS = ("pydoc", "digits")

#: config key -> CLI option of `brownformer pretrained`
_OPTIONS = {"text": "--text", "dataset": "--dataset", "input_ids": "--input-ids", "images": "--images",
            "n_inputs": "--n-inputs", "n_tokens": "--n-tokens", "checkpoints": "--checkpoints",
            "module_map": "--module-map", "calibration_replicates": "--calibration-replicates"}
_SOURCES = ("text", "dataset", "input_ids", "images")
_PATHS = ("path", "text", "input_ids", "images", "checkpoints", "module_map")  # "~" expanded


def pretrained_entries(raw: Mapping) -> dict[str, dict]:
    """name -> settings of the validated raw config's `pretrained` block ({} when absent).

    Raises:
        ConfigError: a path without config.json, or more than one input source (naming the key).
    """
    out = {}
    for name, entry in sorted((raw.get("pretrained") or {}).items()):
        entry = {k: (str(Path(v).expanduser()) if k in _PATHS else v) for k, v in entry.items()}
        if not (Path(entry["path"]) / "config.json").is_file():
            raise ConfigError(f"pretrained.{name}.path: {entry['path']!r} has no config.json "
                              "(a local Hugging Face model folder is needed; nothing is downloaded)")
        given = [k for k in _SOURCES if k in entry]
        if len(given) > 1:
            raise ConfigError(f"pretrained.{name}: give one input source, not {given}")
        out[name] = entry
    return out


def cli_arguments(entry: Mapping) -> str:
    """The entry's options for `brownformer pretrained` as one shell-quoted string (path excluded)."""
    parts = []
    for key, option in _OPTIONS.items():
        if key in entry:
            parts += [option, shlex.quote(str(entry[key]))]
    return " ".join(parts)
