"""benchmarks/stats_speed.py: its four commands are the CLI's (they parse, and name the pipeline's rules' inputs)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_four_commands_parse_as_the_pipeline_calls_them(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import stats_speed

    from brownformer.cli import build_parser
    for rset in ("vit-pre__adamw__s0", "vit-pre__adamw__s1"):
        (tmp_path / "results" / "replicas" / rset / "stats").mkdir(parents=True)
        (tmp_path / "results" / "replicas" / rset / "stats" / "summary.json").write_text("{}")
    cmds = stats_speed.commands(tmp_path, tmp_path / "out")
    assert list(cmds) == ["compute_stats", "compute_replica_stats", "calibrate_run", "calibrate_replica_set"]
    for name, cmd in cmds.items():
        assert cmd[1:3] == ["-m", "brownformer"]
        args = build_parser().parse_args(cmd[3:])
        assert str(args.config) == str(tmp_path / "config" / "config.yaml")
        if name.startswith("calibrate"):
            assert [Path(p).parent.parent.name for p in args.context] == ["vit-pre__adamw__s0", "vit-pre__adamw__s1"]
            assert args.jobs == 1 and str(args.out).startswith(str(tmp_path / "out"))
