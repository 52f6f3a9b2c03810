"""`brownformer stats trajectory FILE.npy` prints a verdict line; --json prints only JSON; --quiet nothing."""
import json

import numpy as np
import pytest

from brownformer.cli import main


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    path = tmp_path_factory.mktemp("walk") / "walk.npy"
    rng = np.random.default_rng(0)
    np.save(path, np.cumsum(rng.normal(size=(40, 24, 4)), axis=0))
    return path


def test_prints_the_verdict_table_without_writing(walk, capsys):
    assert main(["stats", "trajectory", str(walk)]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(str(walk)))
    assert row[len(str(walk)):].split("  ")[1].strip().lower() in ("brownian", "not brownian", "inconclusive")
    assert not (walk.parent / "walk.stats.json").exists()


def test_json_prints_only_json_and_matches_the_file(walk, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert main(["stats", "trajectory", str(walk), "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["verdict"] in ("brownian", "not brownian", "inconclusive")


def test_quiet_prints_nothing(walk, tmp_path, capsys):
    assert main(["stats", "trajectory", str(walk), "--quiet", "--out", str(tmp_path / "o.json")]) == 0
    assert capsys.readouterr().out == ""
