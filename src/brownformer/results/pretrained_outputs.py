"""The pretrained models' outputs (config `pretrained:`): RESULTS/pretrained/<name>/pretrained.json."""
from __future__ import annotations

import json

from brownformer.results.reader import Results

__all__ = ["pretrained_models"]


def pretrained_models(res: Results) -> dict[str, dict | None]:
    """name -> pretrained.json content for every model the config lists; None (and a note) when missing."""
    out: dict[str, dict | None] = {}
    for name in sorted(res.cfg.raw.get("pretrained") or {}):
        path = res.root / "pretrained" / name / "pretrained.json"
        try:
            out[name] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            res.notes.append(f"pretrained model {name}: {path} unreadable ({type(exc).__name__})")
            out[name] = None
    return out
