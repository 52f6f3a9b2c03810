"""The config's `pretrained:` block: name -> a model (a local folder, or a package that ships one) and its settings.

The schema checks the keys; this module checks what it cannot: each path holds a config.json (a
ConfigError naming the key otherwise), and turns an entry into `brownformer pretrained` arguments. A package
entry is not checked here: a package that is missing (or weights that fail their sha256) are recorded by its job
as "unavailable", so the rest of the run goes on.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from brownformer.config import ConfigError

from .packaged import PACKAGE_PREFIX, ModelUnavailable, package_folder, weight_files

__all__ = ["pretrained_entries", "cli_arguments", "model_spec", "model_files", "DATASETS", "DEFAULT_N_INPUTS",
           "DEFAULT_N_TOKENS", "DEPTH_STEPS"]

# Input defaults of `brownformer pretrained` (inputs.py); here, without torch, so that building the CLI's parser
# does not import torch (~2.7 CPU-s of every pipeline job that needs no torch)
DEFAULT_N_INPUTS = 8
# 8 x 32 = 256 walkers: claim 3's calibration (now the default) costs about linearly in the walkers; on
# all-MiniLM-L6-v2 (d 384) 8 x 32 took 148 CPU-s, 8 x 16 82 (docs/methods/pretrained.md, Cost)
DEFAULT_N_TOKENS = 32
DATASETS = ("pydoc", "digits")
#: depth resolution of the depth files (trajectories.py): every sub-layer (the default), or one step per block
DEPTH_STEPS = ("sublayer", "block")

#: config key -> CLI option of `brownformer pretrained`
_OPTIONS = {"text": "--text", "dataset": "--dataset", "input_ids": "--input-ids", "images": "--images",
            "n_inputs": "--n-inputs", "n_tokens": "--n-tokens", "checkpoints": "--checkpoints",
            "module_map": "--module-map", "calibration_replicates": "--calibration-replicates",
            "depth_steps": "--depth-steps"}
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
        if ("path" in entry) == ("package" in entry):
            raise ConfigError(f"pretrained.{name}: give exactly one of path and package")
        if "path" in entry and not (Path(entry["path"]) / "config.json").is_file():
            raise ConfigError(f"pretrained.{name}.path: {entry['path']!r} has no config.json "
                              "(a local Hugging Face model folder is needed; nothing is downloaded)")
        given = [k for k in _SOURCES if k in entry]
        if len(given) > 1:
            raise ConfigError(f"pretrained.{name}: give one input source, not {given}")
        out[name] = entry
    return out


def model_spec(entry: Mapping) -> str:
    """The MODEL argument of `brownformer pretrained`: the folder, or package:NAME."""
    return entry["path"] if "path" in entry else f"{PACKAGE_PREFIX}{entry['package']}"


def model_files(entry: Mapping) -> list[str]:
    """config.json and the weights of the entry's model (a changed checkpoint is analysed again); [] for a package
    that is not installed (its job records it as unavailable)."""
    try:
        d = Path(entry["path"]) if "path" in entry else package_folder(entry["package"])
    except ModelUnavailable:
        return []
    return [str(d / "config.json"), *(str(p) for p in weight_files(d))]


def cli_arguments(entry: Mapping) -> str:
    """The entry's options for `brownformer pretrained` as one shell-quoted string (model excluded); a
    calibration_replicates of 0 is --no-calibration, each sha256 a --sha256 FILE=HEX."""
    parts = []
    for key, option in _OPTIONS.items():
        if key == "calibration_replicates" and entry.get(key) == 0:
            parts.append("--no-calibration")
        elif key in entry:
            parts += [option, shlex.quote(str(entry[key]))]
    for fname, digest in sorted((entry.get("sha256") or {}).items()):
        parts += ["--sha256", shlex.quote(f"{fname}={digest}")]
    return " ".join(parts)
