"""A saved checkpoint series: weights taking Gaussian steps are Brownian, a drifting series is not."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")

from brownformer.pretrained import InputSpec, PretrainedRequest, analyze_pretrained  # noqa: E402
from brownformer.pretrained.checkpoints import find_checkpoints  # noqa: E402

from .tiny_models import save_ids, tiny_model  # noqa: E402

N_CHECKPOINTS = 10
WIDTH = 64  # rows of each matrix are the walkers: 64 give the equivalence test room to decide
STEP = 0.01  # weight step size; GPT-2 init has std 0.02
CALIBRATION_REPLICATES = 20  # enough to exercise the calibrated path, not to certify anything


def _save_series(root, path_of_step: str):
    """N_CHECKPOINTS checkpoints named step<50 t> (so lexicographic order is NOT the training order).

    path_of_step "gaussian": W_t = W_{t-1} + STEP * N(0, I) (Brownian); "accelerating": W_t = W_0 + STEP t^2 v
    plus a small noise (superdiffusive: a per-row linear drift, which the battery removes, cannot explain it).
    """
    model = tiny_model("gpt2", n_layers=1, width=WIDTH, seed=0)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    velocity = {k: torch.randn(v.shape, generator=g) for k, v in base.items()}
    cur = {k: v.clone() for k, v in base.items()}
    for t in range(N_CHECKPOINTS):
        for k in cur:
            if "attn" not in k or not cur[k].is_floating_point():
                continue
            if path_of_step == "gaussian":
                cur[k] += STEP * torch.randn(cur[k].shape, generator=g) if t else 0.0
            else:
                cur[k] = base[k] + STEP * t**2 * velocity[k] + 0.1 * STEP * torch.randn(cur[k].shape, generator=g)
        model.load_state_dict(cur)
        model.save_pretrained(root / f"step{50 * t}")
    return root


def _weight_verdicts(tmp_path, path_of_step, calibration_replicates=0):
    series = _save_series(tmp_path / "series", path_of_step)
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=16)
    out = tmp_path / "out"
    res = analyze_pretrained(PretrainedRequest(series / f"step{50 * (N_CHECKPOINTS - 1)}", out,
                                               InputSpec(input_ids=ids, n_inputs=4, n_tokens=16),
                                               checkpoints=str(series / "step*"),
                                               calibration_replicates=calibration_replicates))
    files = sorted((out / "stats" / "weights").glob("*.json"))
    assert [f.stem for f in files] == ["l0_k", "l0_o", "l0_q", "l0_v"]
    return res, out, {f.stem: json.loads(f.read_text())["verdict"] for f in files}


def test_gaussian_weight_steps_are_brownian(tmp_path):
    res, out, verdicts = _weight_verdicts(tmp_path, "gaussian", calibration_replicates=CALIBRATION_REPLICATES)
    assert set(verdicts.values()) == {"brownian"}, verdicts
    steps = [50 * t for t in range(N_CHECKPOINTS)]
    assert [c["step"] for c in res["checkpoints"]] == steps  # numeric, not lexicographic, order
    side = json.loads((out / "trajectories" / "weights" / "l0_q.sidecar.json").read_text())
    assert side["times"] == steps and side["drift"] == "per_walker"
    assert np.load(out / "trajectories" / "training" / "ln_l0.npy").shape == (N_CHECKPOINTS, 4 * 16, WIDTH)
    # calibrated at the files' shapes: the claim may be decided and cites the calibration
    assert (out / "stats" / "calibration.parquet").is_file()
    assert res["claims"]["3c"]["calibration_status"].startswith("calibrated")
    assert res["claims"]["3c"]["verdict"] != "not supported"


def test_accelerating_weights_are_not_brownian(tmp_path):
    res, _, verdicts = _weight_verdicts(tmp_path, "accelerating")
    assert set(verdicts.values()) == {"not brownian"}, verdicts
    # no calibration table: the claim cannot be "supported" and says why
    assert res["claims"]["3c"]["verdict"] != "supported"
    assert res["claims"]["3c"]["calibration_status"].startswith("not calibrated")


def test_find_checkpoints_refuses_short_or_unnumbered_series(tmp_path):
    for name in ("step1", "step2"):
        (tmp_path / name).mkdir()
    with pytest.raises(ValueError, match="need at least 3"):
        find_checkpoints(str(tmp_path / "step*"))
    tiny_model("gpt2", n_layers=1).save_pretrained(tmp_path / "final")
    for name in ("step1", "step2"):
        tiny_model("gpt2", n_layers=1).save_pretrained(tmp_path / name)
    with pytest.raises(ValueError, match="no step number"):
        find_checkpoints(str(tmp_path / "*"))
