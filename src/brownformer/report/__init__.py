"""The paper-style report: an executed notebook and its self-contained HTML."""
from __future__ import annotations

__all__ = ["build_report"]


def build_report(*args, **kwargs):
    """See brownformer.report.build.build_report (imported lazily: nbclient is slow to import)."""
    from brownformer.report.build import build_report as _build
    return _build(*args, **kwargs)
