"""Per-file attention statistics: nulls on a subsample, the step-0 baseline analysed once and paired."""
import json

import numpy as np
import pytest

from brownformer.config import StatsConfig
from brownformer.stats_stage.attention_files import analyze_attention_file, attention_file_record, init_attention

STATS = StatsConfig(n_resamples=199)
L, H, B, N, D = 1, 2, 6, 8, 5


def _softmax(S):
    E = np.exp(S - S.max(-1, keepdims=True))
    return E / E.sum(-1, keepdims=True)


def _write(tmp_path, name, kappa, step, rng):
    U = rng.standard_normal((L, B, N, D))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = _softmax(np.broadcast_to(kappa * np.einsum("lbid,lbjd->lbij", U, U)[:, None], (L, H, B, N, N)))
    np.save(tmp_path / f"{name}.npy", A)
    np.save(tmp_path / f"{name}_features.npy", U)
    (tmp_path / f"{name}.json").write_text(json.dumps({"kind": "attention", "step": step, "causal": False}))
    return {"path": f"{name}.npy", "category": "attention"}


@pytest.fixture
def attention_dir(tmp_path):
    rng = np.random.default_rng(0)
    entries = [_write(tmp_path, "c0", 0.5, 0, rng), _write(tmp_path, "c1", 6.0, 100, rng)]
    return tmp_path, entries


def test_step0_is_the_baseline_with_paired_differences(attention_dir):
    tmp, entries = attention_dir
    init = init_attention(entries, tmp, STATS)
    assert init is not None and init.path.endswith("c0.npy")
    out = attention_file_record(tmp / "c1.npy", STATS, init)
    assert out.step == 100
    assert out.null_models.init == init.result.aggregate
    kappa = out.init_comparison.quantities["vmf_kappa"]
    assert out.init_comparison.unit == "probe input" and kappa.n_units == B
    assert analyze_attention_file(tmp / "c1.npy", STATS, init) == out.to_dict()  # the JSON the file holds
    # independent reference: the paired difference of the per-matrix kappas, averaged
    ref = np.mean(np.array(out.per_matrix.vmf_kappa) - np.array(init.result.per_matrix.vmf_kappa))
    assert kappa.difference == pytest.approx(ref)
    assert kappa.confidence_interval[0] <= kappa.difference <= kappa.confidence_interval[1]
    assert kappa.difference == pytest.approx(5.5, abs=0.05)  # 6.0 - 0.5, both exact vMF kernels


def test_nulls_destroy_the_kernel(attention_dir):
    tmp, entries = attention_dir
    out = analyze_attention_file(tmp / "c1.npy", STATS, None)
    nulls = out["null_models"]
    assert out["aggregate"]["vmf_output_error"]["mean"] < 1e-6
    assert nulls["row_shuffled"]["vmf_output_error"]["mean"] > 0.7
    assert nulls["shuffled_keys"]["vmf_output_error"]["mean"] > 0.7
    assert "init_comparison" not in out


def test_head_kernels_come_from_the_weights_at_the_files_capture(tmp_path):
    """attention/c<k>.npy's sidecar names capture k; W_Q, W_K are read from weights/l<l>_<q|k>.npy at k's row."""
    from brownformer.stats.markov.markov_chain import weight_isotropy
    rng = np.random.default_rng(7)
    att = tmp_path / "attention"
    att.mkdir()
    _write(att, "c4", 3.0, 40, rng)
    side = json.loads((att / "c4.json").read_text())
    side.update(axes=["layer", "head", "input", "query", "key"], source={"captures": [4]})
    (att / "c4.json").write_text(json.dumps(side))
    W = {m: rng.standard_normal((3, 4, 4)) for m in "qk"}  # captures 0, 4, 9; 2 heads of 2 rows
    (tmp_path / "weights").mkdir()
    for m, arr in W.items():
        np.save(tmp_path / "weights" / f"l0_{m}.npy", arr)
        (tmp_path / "weights" / f"l0_{m}.json").write_text(json.dumps(
            {"source": {"captures": [0, 4, 9]}, "projection": {"projected": False}}))
    out = analyze_attention_file(att / "c4.npy", STATS, None)
    ref = weight_isotropy(W["q"][1], W["k"][1], n_heads=H)
    assert out["head_kernels"]["per_layer"] == [ref.to_dict()]
    assert "head_averaged" in out and len(out["head_averaged"]["per_matrix"]["vmf_kappa"]) == L * B
    side["source"] = {"captures": [5]}  # a capture the weights never saw: no kernels, not a wrong one
    (att / "c4.json").write_text(json.dumps(side))
    assert attention_file_record(att / "c4.npy", STATS, None).head_kernels is None
