"""Provenance of every run and stage: config hash, git state, versions, device, seeds."""
from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = ["git_state", "package_versions", "device_description", "build_manifest"]

_PACKAGES = ("brownformer", "torch", "numpy", "scipy", "pandas", "statsmodels", "arch", "nolds",
             "powerlaw", "scikit-learn", "matplotlib", "seaborn", "snakemake")


def git_state(path: str | Path | None = None) -> dict[str, Any]:
    """SHA and dirty flag of the git checkout holding `path` (the package by default), or nulls."""
    where = Path(path) if path else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return {"sha": sha, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    return out


def device_description(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device.type, "platform": platform.platform(),
                            "processor": platform.processor() or platform.machine(),
                            "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
        info["capability"] = list(torch.cuda.get_device_capability(device))
    return info


def build_manifest(**fields: Any) -> dict[str, Any]:
    """Merge caller fields with git state and versions."""
    return {"git": git_state(), "versions": package_versions(), **fields}
