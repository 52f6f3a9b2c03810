"""How many runs the config asks for and how many the run records show: the one home of the report's counts."""
from __future__ import annotations

from brownformer.report.context import ReportContext
from brownformer.target_stop import stopped_runs

__all__ = ["run_counts", "trained_optimizers"]


def run_counts(ctx: ReportContext) -> dict[str, int]:
    """The training jobs of the config and how many left metrics: grid runs, replica runs (claims 3b/3c's extra
    trainings), those that finished, those that stopped at claim 4's target. The one home of these counts."""
    cfg, res = ctx.cfg, ctx.results
    grid, replicas = cfg.runs(), cfg.replica_runs()
    trained = set(res.metrics["run"]) if not res.metrics.empty else set()
    replicas_trained = sum((res.run_dir(r.run_id) / "metrics.parquet").is_file() for r in replicas)
    return {"grid": len(grid), "replicas": len(replicas), "jobs": len(grid) + len(replicas),
            "grid_trained": len(trained & {r.run_id for r in grid}), "replicas_trained": replicas_trained,
            "stopped": len(stopped_runs(res.metrics)), "set_to_stop": sum(cfg.stop_target(r.run_id) is not None
                                                                          for r in grid)}


def trained_optimizers(ctx: ReportContext) -> list[str]:
    """The optimizers of the grid that trained at least one run (metrics present), in config order."""
    res = ctx.results
    with_metrics = set(res.metrics["optimizer"]) if not res.metrics.empty else set()
    return [o for o in dict.fromkeys(r.optimizer for r in ctx.cfg.runs()) if o in with_metrics]
