"""`brownformer stats attention FILE.npy --out OUT.json`: the DESIGN.md contract on any row-stochastic array."""
import json

import numpy as np

from brownformer.cli import main
from brownformer.io import sha256_file

CONTRACT = ("spectral_gap", "stationary_entropy", "entropy_rate", "reversibility_residual", "dobrushin",
            "doubly_stochastic_deviation")


def _softmax(S):
    E = np.exp(S - S.max(-1, keepdims=True))
    return E / E.sum(-1, keepdims=True)


def test_contract_with_features(tmp_path):
    rng = np.random.default_rng(0)
    U = rng.standard_normal((3, 9, 5))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = _softmax(4.0 * np.einsum("bid,bjd->bij", U, U))
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "f.npy", U)
    assert main(["stats", "attention", str(tmp_path / "a.npy"), "--features", str(tmp_path / "f.npy"),
                 "--out", str(tmp_path / "o.json")]) == 0
    out = json.loads((tmp_path / "o.json").read_text())
    for q in CONTRACT:
        assert len(out["per_matrix"][q]) == 3 and q in out["aggregate"]
    assert abs(out["aggregate"]["vmf_kappa"]["mean"] - 4.0) < 1e-2  # the diagonal-free fit recovers kappa
    assert out["aggregate"]["vmf_explained"]["mean"] > 0.99
    assert out["max_row_sum_error"] < 1e-12
    assert out["input"]["sha256"] == sha256_file(tmp_path / "a.npy")


def test_not_row_stochastic_exits_2(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.full((2, 4, 4), 0.3))
    assert main(["stats", "attention", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "row-stochastic" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()
