"""Atomic writes and verified reads of the prepared-data folder."""
import shutil

import pytest

from brownformer.data import DataError, load_prepared, prepare_dataset
from brownformer.data import dataset_folder as store

from .conftest import dataset_cfg


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_failed_prepare_leaves_previous_output_intact(tmp_path):
    out = tmp_path / "ds"
    prepare_dataset(dataset_cfg("digits", name="ds"), out)
    before = _snapshot(out)
    # A failure before anything is written (bad input) ...
    with pytest.raises(DataError):
        prepare_dataset(dataset_cfg("textfile", name="ds", path=str(tmp_path / "missing.txt")), out)
    assert _snapshot(out) == before
    load_prepared(out)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ds"]
    assert leftovers == []


def test_failure_while_writing_leaves_previous_output_intact(tmp_path, monkeypatch):
    out = tmp_path / "ds"
    prepare_dataset(dataset_cfg("digits", name="ds"), out)
    before = _snapshot(out)
    real_save = store._save_npz
    calls = []

    def failing_save(path, arrays):  # ... and one while the files are being written (disk full)
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("No space left on device")
        real_save(path, arrays)

    monkeypatch.setattr(store, "_save_npz", failing_save)
    with pytest.raises(OSError, match="No space"):
        prepare_dataset(dataset_cfg("digits", name="ds", split_seed=5), out)
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # temporary folder removed


def test_load_prepared_detects_corruption(digits_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(digits_dir, copy)
    blob = bytearray((copy / "val.npz").read_bytes())
    blob[-100] ^= 0xFF  # one flipped byte inside the array data
    (copy / "val.npz").write_bytes(bytes(blob))
    with pytest.raises(DataError, match=r"val\.npz.*corrupted"):
        load_prepared(copy)
    with pytest.raises(DataError, match=r"val\.npz.*cannot be read"):
        load_prepared(copy, verify=False)  # without the checksum, numpy's zip CRC still catches it


def test_load_prepared_names_missing_file(digits_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(digits_dir, copy)
    (copy / "test.npz").unlink()
    with pytest.raises(DataError, match=r"test\.npz.*missing"):
        load_prepared(copy)
    (copy / "meta.json").unlink()
    with pytest.raises(DataError, match=r"meta\.json.*missing"):
        load_prepared(copy)
    with pytest.raises(DataError, match="nowhere"):
        load_prepared(tmp_path / "nowhere")


def test_rewrite_replaces_output(tmp_path):
    out = tmp_path / "ds"
    first = prepare_dataset(dataset_cfg("digits", name="ds"), out)
    second = prepare_dataset(dataset_cfg("digits", name="ds", split_seed=1), out)
    assert first["sha256"] != second["sha256"]
    assert load_prepared(out).meta["split_seed"] == 1
