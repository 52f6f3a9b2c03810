"""Execute the report notebook and convert it to one self-contained HTML file.

The notebook (report.ipynb next to this module, the only copy) only calls brownformer.report's
section functions; papermill injects the paths after its cell tagged "parameters". It runs in a
kernel started from this very interpreter, so the kernel sees the same installed brownformer.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import nbformat
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from brownformer.config import ExperimentConfig
from brownformer.io import atomic_path

log = logging.getLogger(__name__)

__all__ = ["build_report", "NOTEBOOK"]

NOTEBOOK = Path(__file__).with_name("report.ipynb")
_KERNEL = "brownformer-report"


@contextmanager
def _kernel_for_this_python() -> Iterator[str]:
    """A temporary kernelspec whose argv is sys.executable, visible through JUPYTER_PATH."""
    with tempfile.TemporaryDirectory(prefix="bf-kernel-") as tmp:
        spec_dir = Path(tmp) / "kernels" / _KERNEL
        spec_dir.mkdir(parents=True)
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "brownformer report", "language": "python"}))
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = tmp + (os.pathsep + old if old else "")
        try:
            yield _KERNEL
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = old


def _strip_stderr(nb) -> None:
    """Move stderr (warnings, logs) from the HTML copy into this process's log."""
    for cell in nb.cells:
        keep = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                log.warning("report notebook stderr: %s", str(out.get("text", "")).strip()[:2000])
            else:
                keep.append(out)
        if cell.cell_type == "code":
            cell.outputs = keep


def _to_html(nb) -> str:
    from nbconvert import HTMLExporter
    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    return body


def build_report(cfg: ExperimentConfig, results_dir: Path, figures_dir: Path, out_dir: Path, *,
                 config_path: Path, notebook: Path | None = None, timeout: int = 600) -> Path:
    """Execute the report notebook into out_dir/report.ipynb and out_dir/report.html.

    Args:
        cfg: the validated config (its title names the HTML page).
        results_dir, figures_dir: inputs (docs/ARTIFACTS.md); missing parts are reported as "not available".
        out_dir: where report.ipynb and report.html are written (atomically).
        config_path: the config file the notebook loads (it is shown, with its hash, in the appendix).
        notebook: the notebook to execute; the packaged copy by default.
        timeout: seconds allowed per cell.
    Returns:
        The path of report.html.
    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (the partial notebook is still written).
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = load_notebook_node(str(notebook or NOTEBOOK))  # papermill's reader: every cell gets its tags list
    nb = parameterize_notebook(nb, {"config_path": str(Path(config_path).resolve()),
                                    "results_dir": str(Path(results_dir).resolve()),
                                    "figures_dir": str(Path(figures_dir).resolve())},
                               kernel_name="python3", language="python")
    nb.metadata["title"] = cfg.report.title
    with _kernel_for_this_python() as kernel:
        client = NotebookClient(nb, kernel_name=kernel, timeout=timeout, resources={"metadata": {"path": str(out_dir)}})
        try:
            client.execute()
        except CellExecutionError:
            with atomic_path(out_dir / "report.ipynb") as tmp:
                nbformat.write(nb, tmp)
            log.error("report notebook failed; partial notebook kept at %s", out_dir / "report.ipynb")
            raise
    nb.metadata.get("kernelspec", {}).update(name="python3", display_name="Python 3")
    with atomic_path(out_dir / "report.ipynb") as tmp:
        nbformat.write(nb, tmp)
    html_nb = copy.deepcopy(nb)
    _strip_stderr(html_nb)
    html_path = out_dir / "report.html"
    with atomic_path(html_path) as tmp:
        tmp.write_text(_to_html(html_nb), encoding="utf-8")
    log.info("wrote %s and %s", html_path, out_dir / "report.ipynb")
    return html_path
