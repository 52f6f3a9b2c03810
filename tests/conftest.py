"""Shared fixtures: a tiny validated config and prepared digits data (built once per session)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ci_raw() -> dict:
    with open(ROOT / "config" / "ci.yaml") as fh:
        return yaml.safe_load(fh)


@pytest.fixture()
def raw_config(ci_raw) -> dict:
    """A fresh, mutable copy of config/ci.yaml as a dict."""
    return copy.deepcopy(ci_raw)


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory, ci_raw) -> Path:
    from brownformer.config import from_dict
    from brownformer.data import prepare_dataset

    cfg = from_dict(copy.deepcopy(ci_raw))
    out = tmp_path_factory.mktemp("data") / "digits"
    prepare_dataset(cfg.datasets["digits"], out)
    return out
