"""`brownformer stats attention FILE.npy --out OUT.json`: the contract (docs/ARTIFACTS.md) on any row-stochastic array."""
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
    assert out["aggregate"]["vmf_output_error"]["mean"] < 1e-6
    assert out["max_row_sum_error"] < 1e-12
    assert out["input"]["sha256"] == sha256_file(tmp_path / "a.npy")


def test_not_row_stochastic_exits_2(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.full((2, 4, 4), 0.3))
    assert main(["stats", "attention", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "row-stochastic" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()


def _files(tmp_path, *, symmetric=True):
    rng = np.random.default_rng(1)
    U = rng.standard_normal((6, 9, 5))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    R = rng.standard_normal((5, 5))
    M = 4.0 * np.eye(5) if symmetric else 3.0 * (R - R.T) + R
    np.save(tmp_path / "a.npy", _softmax(np.einsum("bid,de,bje->bij", U, M, U)))
    np.save(tmp_path / "f.npy", U)
    return ["stats", "attention", str(tmp_path / "a.npy"), "--features", str(tmp_path / "f.npy"),
            "--out", str(tmp_path / "o.json")]


def test_prints_a_verdict_line_per_criterion(tmp_path, capsys):
    args = _files(tmp_path)
    np.save(tmp_path / "q.npy", np.eye(5))
    np.save(tmp_path / "k.npy", 2.0 * np.eye(5))
    assert main(args + ["--wq", str(tmp_path / "q.npy"), "--wk", str(tmp_path / "k.npy"), "--heads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    out = json.loads((tmp_path / "o.json").read_text())
    assert set(out["verdicts"]) == {"head_isotropy", "vmf_output_error", "reversibility_residual"}
    for name in out["verdicts"]:  # the verdict table on stdout: one row per criterion
        hit = [ln for ln in lines if f": {name} " in ln]
        assert len(hit) == 1 and hit[0].split()[2] == "SUPPORTED" and ("<= " in hit[0] or ">= " in hit[0])


def test_verdicts_fail_on_an_anisotropic_irreversible_kernel(tmp_path, capsys):
    assert main(_files(tmp_path, symmetric=False)) == 0
    out = json.loads((tmp_path / "o.json").read_text())["verdicts"]
    assert out["vmf_output_error"]["verdict"] == "not supported"
    assert out["reversibility_residual"]["verdict"] == "not supported"
    assert out["head_isotropy"]["verdict"] == "inconclusive"  # no weights given: said, not guessed
    assert "NOT SUPPORTED" in capsys.readouterr().out


def test_json_prints_only_json_and_quiet_prints_nothing(tmp_path, capsys):
    assert main(_files(tmp_path) + ["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "o.json").read_text())
    assert main(_files(tmp_path) + ["--quiet"]) == 0
    assert capsys.readouterr().out == ""
