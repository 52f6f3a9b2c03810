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


def test_gpt2_writes_pretrained_json(tmp_path, capsys):
    model_dir = save_model(tiny_model("gpt2", n_layers=8), tmp_path / "gpt2")
    ids = save_ids(tmp_path / "ids.npy", n_inputs=4, n_tokens=16)
    out = tmp_path / "out"
    rc, _ = _run(["pretrained", str(model_dir), "--out", str(out), "--input-ids", str(ids)], capsys)
    assert rc == 0
    res = json.loads((out / "pretrained.json").read_text())
    assert res["model_type"] == "gpt2" and res["name"] == "gpt2"
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
    rc, _ = _run(["pretrained", str(model_dir), "--out", str(out), "--dataset", "digits", "--n-inputs", "4"], capsys)
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
