"""`brownformer pretrained` end to end on tiny saved models: exit 0 and pretrained.json; bad inputs exit 2
with one line and write nothing."""
from __future__ import annotations

import json
import socket
import sys

import pytest

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")

import transformers as T  # noqa: E402

from brownformer.cli import main  # noqa: E402
from brownformer.io import sha256_file  # noqa: E402

from .tiny_models import save_ids, save_model, tiny_model  # noqa: E402

CLAIMS = {"1", "2", "3a", "3b", "3c"}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Offline by contract: every attempt to open a connection is refused and recorded, and fails the test
    even when the library catches the refusal."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] or kwargs)
        raise OSError("network disabled by the test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield
    assert not attempts, f"network calls attempted: {attempts}"


def _run(argv, capsys):
    capsys.readouterr()  # drop what building the model printed (save_pretrained's progress bar)
    rc = main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


def _run_out(argv, capsys):
    """(exit code, stdout, stderr) of one call."""
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_gpt2_writes_pretrained_json(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2", n_layers=8), tmp_path / "gpt2")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=16)
    out = tmp_path / "out"
    rc, _ = _run(["pretrained", str(model_dir), "--out", str(out), "--input-ids", str(ids), "--no-calibration"],
                 capsys)
    assert rc == 0
    res = json.loads((out / "pretrained.json").read_text())
    assert res["model_type"] == "gpt2" and res["name"] == "gpt2"
    assert res["origin"] == {**res["origin"], "kind": "path", "path": str(model_dir)}
    assert res["versions"]["transformers"] == T.__version__
    assert res["weights_sha256"]["files"] == {"model.safetensors": sha256_file(model_dir / "model.safetensors")}
    assert set(res["claims"]) == CLAIMS
    assert all(c["verdict"] in ("supported", "not supported", "inconclusive") and c["calibration_status"]
               for c in res["claims"].values())
    assert res["shape"] == {"n_layers": 8, "d_model": 32, "n_heads": 4, "n_kv_heads": 4}
    index = json.loads((out / "trajectories" / "index.json").read_text())
    paths = {e["path"] for e in index["files"]}
    assert {"depth/ln_c1.npy", "depth/lnaff_c1.npy", "depth/resid_c1.npy", "attention/c0.npy",
            "attention/c1.npy"} <= paths
    side = json.loads((out / "trajectories" / "depth" / "ln_c1.sidecar.json").read_text())
    assert side["kind"] == "sphere" and side["n_inputs"] == 4 and side["n_tokens"] == 16 and side["sum_zero"]
    # the random-init null is claim 2's step-0 baseline
    att = json.loads((out / "stats" / "attention" / "c1.json").read_text())
    assert "init" in att["null_models"] and "init_comparison" in att
    assert not list(tmp_path.glob(".out.new-*"))  # staging folder removed


def test_vit_on_digits_writes_pretrained_json(tmp_path, capsys):
    model_dir = save_model(tiny_model("vit"), tmp_path / "vit")
    out = tmp_path / "out"
    rc, _ = _run(["pretrained", str(model_dir), "--out", str(out), "--dataset", "digits", "--n-inputs", "4",
                  "--no-calibration"], capsys)
    assert rc == 0
    res = json.loads((out / "pretrained.json").read_text())
    assert res["model_type"] == "vit" and res["inputs"]["n_tokens"] == 17  # 16 patches + CLS
    assert res["adapter"]["causal"] is False and set(res["claims"]) == CLAIMS


def _assert_failed_cleanly(rc, err, out, match):
    assert rc == 2
    assert len(err) == 1 and match in err[0], err
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.new-*"))


def test_folder_without_a_model_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    rc, err = _run(["pretrained", str(tmp_path / "empty"), "--out", str(out)], capsys)
    _assert_failed_cleanly(rc, err, out, "no config.json")


def test_unknown_model_type_exits_2(tmp_path, capsys):
    cfg = T.OPTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, ffn_dim=64, vocab_size=50,
                      max_position_embeddings=64, word_embed_proj_dim=32)
    model_dir = save_model(T.AutoModel.from_config(cfg), tmp_path / "opt")
    out = tmp_path / "out"
    rc, err = _run(["pretrained", str(model_dir), "--out", str(out), "--input-ids",
                    str(save_ids(tmp_path / "ids.npy"))], capsys)
    _assert_failed_cleanly(rc, err, out, "model_type 'opt' has no adapter")


def test_attention_weights_unavailable_exits_2(tmp_path, capsys, monkeypatch):
    """A model whose attention returns no weights (as fused kernels do) is refused, not analysed as empty."""
    model_dir = save_model(tiny_model("gpt2"), tmp_path / "gpt2")
    modeling = sys.modules[type(tiny_model("gpt2").h[0].attn).__module__]
    original = modeling.eager_attention_forward

    def no_weights(*args, **kwargs):
        return original(*args, **kwargs)[0], None

    monkeypatch.setattr(modeling, "eager_attention_forward", no_weights)
    out = tmp_path / "out"
    rc, err = _run(["pretrained", str(model_dir), "--out", str(out), "--input-ids",
                    str(save_ids(tmp_path / "ids.npy"))], capsys)
    _assert_failed_cleanly(rc, err, out, "returned no attention weights")


def test_depth_is_read_after_every_sublayer_unless_told_per_block(tmp_path, capsys):
    model_dir = save_model(tiny_model("bert", n_layers=3), tmp_path / "bert")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=8)
    for steps, n_ln in (("sublayer", 6), ("block", 3)):
        out = tmp_path / steps
        rc, _ = _run(["pretrained", str(model_dir), "--out", str(out), "--input-ids", str(ids), "--no-calibration",
                      "--depth-steps", steps], capsys)
        assert rc == 0
        ln = json.loads((out / "trajectories" / "depth" / "ln_c1.sidecar.json").read_text())
        resid = json.loads((out / "trajectories" / "depth" / "resid_c1.sidecar.json").read_text())
        assert ln["depth_steps"] == steps and len(ln["times"]) == n_ln and len(resid["times"]) == n_ln + 1
        assert json.loads((out / "pretrained.json").read_text())["depth_steps"] == steps
    # post-LN: the norms read the states after the attention (l + 0.5) and after the MLP (l + 1)
    assert ln["times"] == [0, 1, 2] and json.loads(
        (tmp_path / "sublayer" / "trajectories" / "depth" / "ln_c1.sidecar.json").read_text())["times"] == [
        0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def test_calibrated_by_default_with_the_cost_printed_first_and_a_table_on_stdout(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2", n_layers=4), tmp_path / "gpt2")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=6, n_tokens=8)
    out = tmp_path / "out"
    rc, stdout, stderr = _run_out(["pretrained", str(model_dir), "--out", str(out), "--input-ids", str(ids),
                                   "--calibration-replicates", "40"], capsys)
    assert rc == 0
    res = json.loads((out / "pretrained.json").read_text())
    cost = [line for line in stderr.splitlines() if line.startswith("calibration of claim 3's rule")]
    if res["calibration"]["shapes"]:  # a decided depth file: its shape was simulated, the cost said first
        assert cost and "--no-calibration skips it" in cost[0]
        assert (out / "stats" / "calibration.parquet").exists()
        assert res["claims"]["3a"]["calibration_status"].startswith("calibrated at each file's exact shape")
    else:
        assert res["claims"]["3a"]["calibration_status"].startswith("nothing to calibrate")
    lines = stdout.splitlines()
    assert lines[0].startswith("brownformer pretrained: gpt2") and "estimate [CI]" in lines[1]
    rows = {line.split("  ")[0].strip(): line for line in lines[3:]}
    assert set(rows) == {"gpt2 claim 1", "gpt2 claim 2", "gpt2 claim 3a"}  # no checkpoint series: no 3b, 3c
    assert all(res["claims"][c]["verdict"] in rows[f"gpt2 claim {c}"] for c in ("1", "2", "3a"))
    assert "not calibrated" not in stdout


def test_json_quiet_and_an_uncalibrated_verdict_says_so(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2", n_layers=4), tmp_path / "gpt2")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=8)
    rc, stdout, _ = _run_out(["pretrained", str(model_dir), "--out", str(tmp_path / "a"), "--input-ids", str(ids),
                              "--no-calibration"], capsys)
    assert rc == 0 and "note: gpt2: claim 3 not calibrated (--no-calibration)" in stdout
    rc, stdout, _ = _run_out(["pretrained", str(model_dir), "--out", str(tmp_path / "b"), "--input-ids", str(ids),
                              "--no-calibration", "--json"], capsys)
    assert rc == 0 and json.loads(stdout) == json.loads((tmp_path / "b" / "pretrained.json").read_text())
    rc, stdout, _ = _run_out(["pretrained", str(model_dir), "--out", str(tmp_path / "c"), "--input-ids", str(ids),
                              "--no-calibration", "--quiet"], capsys)
    assert rc == 0 and stdout == "" and (tmp_path / "c" / "pretrained.json").exists()


def test_several_models_side_by_side_each_in_its_own_folder(tmp_path, capsys):
    a = save_model(tiny_model("gpt2", n_layers=3), tmp_path / "small-gpt")
    b = save_model(tiny_model("bert", n_layers=3), tmp_path / "small-bert")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=8)
    out = tmp_path / "out"
    rc, stdout, _ = _run_out(["pretrained", str(a), str(b), "--out", str(out), "--input-ids", str(ids),
                              "--no-calibration"], capsys)
    assert rc == 0
    assert {json.loads((out / n / "pretrained.json").read_text())["model_type"] for n in ("small-gpt", "small-bert")} \
        == {"gpt2", "bert"}
    assert "small-gpt claim 1" in stdout and "small-bert claim 3a" in stdout
    rc, err = _run(["pretrained", str(a), str(b), "--out", str(tmp_path / "x"), "--name", "one"], capsys)
    assert rc == 2 and "--name names one model" in err[-1]


def test_a_missing_package_exits_2_or_is_recorded_as_unavailable(tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = _run(["pretrained", "package:no_such_pkg_here", "--out", str(out)], capsys)
    _assert_failed_cleanly(rc, err, out, "'no_such_pkg_here' is not installed")
    rc, stdout, _ = _run_out(["pretrained", "package:no_such_pkg_here", "--out", str(out), "--name", "m",
                              "--record-unavailable"], capsys)
    assert rc == 0 and "unavailable" in stdout
    res = json.loads((out / "pretrained.json").read_text())
    assert res["status"] == "unavailable" and "not installed" in res["reason"] and res["name"] == "m"


def test_a_sha256_mismatch_exits_2_and_writes_nothing(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2"), tmp_path / "gpt2")
    out = tmp_path / "out"
    rc, err = _run(["pretrained", str(model_dir), "--out", str(out), "--sha256", f"model.safetensors={'0' * 64}"],
                   capsys)
    _assert_failed_cleanly(rc, err, out, "differs from the expected")


def test_pydoc_text_without_tokenizer_files_names_the_missing_tokenizer(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2"), tmp_path / "gpt2")
    out = tmp_path / "out"
    rc, err = _run(["pretrained", str(model_dir), "--out", str(out), "--dataset", "pydoc"], capsys)
    _assert_failed_cleanly(rc, err, out, "no tokenizer files (none of ['tokenizer.json'")
