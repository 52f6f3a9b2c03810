"""Claims 1 and 2 on one fixed model (unit "inputs"): a pretrained checkpoint is one model, decided over its probe
inputs, not the "n seeds 1 < minimum 3" of the seeds unit; the record says what the unit is and reports power."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")

from brownformer.cli import main  # noqa: E402
from brownformer.config import StatsConfig  # noqa: E402
from brownformer.pretrained.trajectories import PRETRAINED_CAPTURE  # noqa: E402
from brownformer.stats.claims import markov_claim, sphere_claim  # noqa: E402
from brownformer.stats.claims.common import FIXED_MODEL_UNIT  # noqa: E402
from brownformer.stats_stage.attention_files import analyze_attention_file  # noqa: E402
from brownformer.stats_stage.summary import collect_run_outputs  # noqa: E402
from brownformer.verdicts import NOT_SUPPORTED, SUPPORTED  # noqa: E402

from .tiny_models import save_ids, save_model, tiny_model  # noqa: E402

DECIDED = (SUPPORTED, NOT_SUPPORTED)
STATS = StatsConfig(n_resamples=199)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    """`brownformer pretrained` on a tiny random-init BERT (post-LN, bidirectional, 4 heads of d_h 8 < d 32)."""
    root = tmp_path_factory.mktemp("fixed")
    model = tiny_model("bert")
    model_dir = save_model(model, root / "bert")
    ids = save_ids(root / "ids.npy", n_inputs=6, n_tokens=16)
    assert main(["pretrained", str(model_dir), "--out", str(root / "out"), "--input-ids", str(ids)]) == 0
    return model, root / "out"


def test_pretrained_claim1_is_decided_over_the_probe_inputs(bert_run):
    _, out = bert_run
    rec = json.loads((out / "pretrained.json").read_text())["claims"]["1"]
    # LayerNorm with its init affine map (gamma 1, beta 0) on a post-LN block: the sphere itself, so supported
    assert rec["verdict"] == SUPPORTED and "n seeds" not in rec["reason"]
    assert rec["seeds"]["unit"] == FIXED_MODEL_UNIT and FIXED_MODEL_UNIT in rec["reason"]
    model_rec = next(iter(rec["per_model"].values()))
    power = model_rec["calibration"]["power"]["radius_spread_ratio"]
    assert 0 <= power["power"] <= 1 and power["true_value"] == pytest.approx(0.25)


def _add_head_weights(model, out) -> None:
    """Write W_Q, W_K of the pretrained capture where the stats stage reads them (weights/l<l>_<q|k>.npy, nn.Linear
    layout) and recompute the pretrained attention file's statistics: claim 2 with its per-head criteria."""
    traj = out / "trajectories"
    (traj / "weights").mkdir(exist_ok=True)
    for layer, block in enumerate(model.encoder.layer):
        for m, lin in (("q", block.attention.self.query), ("k", block.attention.self.key)):
            np.save(traj / "weights" / f"l{layer}_{m}.npy", lin.weight.detach().numpy()[None].astype(np.float32))
            (traj / "weights" / f"l{layer}_{m}.json").write_text(json.dumps(
                {"source": {"captures": [PRETRAINED_CAPTURE]}, "projection": {"projected": False}}))
    path = traj / "attention" / f"c{PRETRAINED_CAPTURE}.npy"
    res = analyze_attention_file(path, STATS, None)
    target = out / "stats" / "attention" / f"c{PRETRAINED_CAPTURE}.json"
    old = json.loads(target.read_text())
    target.write_text(json.dumps({**old, **res}, default=lambda x: None))


def test_claim2_on_one_fixed_model_is_decided_and_the_seeds_unit_is_unchanged(bert_run):
    model, out = bert_run
    _add_head_weights(model, out)
    files = collect_run_outputs({"bert": out / "stats"}).attention
    fixed, seeds = markov_claim(files, STATS, unit="inputs"), markov_claim(files, STATS)
    # random-init heads are far from isotropic in their subspaces (iota_relative ~ 1/d_h), exactly: not supported
    assert fixed.verdict in DECIDED and fixed.verdict == NOT_SUPPORTED
    crit = fixed.per_model["bert"].details.criteria
    assert crit["head_isotropy"].verdict == NOT_SUPPORTED and crit["head_isotropy"].estimate < 0.9
    assert math.isfinite(crit["vmf_output_error"].estimate)  # the fit in each head's subspace exists now
    assert fixed.seeds.unit == FIXED_MODEL_UNIT and fixed.seeds.decided == ["bert"]
    assert fixed.per_model["bert"].calibration.power["reversibility"].power is not None
    # the seeds unit on the same one run: one seed, not the population
    assert seeds.verdict == "inconclusive" and "n seeds 1 < minimum 3" in seeds.reason
    assert seeds.seeds.unit == "training run (seed)"


def test_claim1_seeds_unit_is_unchanged_and_an_unknown_unit_is_refused(bert_run):
    _, out = bert_run
    files = collect_run_outputs({"bert": out / "stats"}).sphere
    assert "n seeds 1 < minimum 3" in sphere_claim(files, STATS).reason
    assert sphere_claim(files, STATS, unit="inputs").verdict in DECIDED
    with pytest.raises(ValueError, match="unit must be one of"):
        sphere_claim(files, STATS, unit="prompts")
    with pytest.raises(ValueError, match="unit must be one of"):
        markov_claim([], STATS, unit="prompts")
