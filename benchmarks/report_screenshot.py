"""Render a report.html in headless Chromium at a reader's window size and save what the first screen shows.

Issue 35's check "the verdict table is visible without scrolling at 1400x900" is read on the PNG by a person (it
is a look, not a number). Without --html the report is built on the fake results tree of the tests with a claims
file shaped like the default run's (tests/report/realistic_claims.py), which takes about a minute on one core.

    python benchmarks/report_screenshot.py --out /tmp/report_1400x900.png
    python benchmarks/report_screenshot.py --html results/report/report.html --out /tmp/default_run.png

Needs the Debian package `chromium` (apt-get install -y chromium). Writes only --out (and a temporary folder).
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WINDOW = (1400, 900)
# a fresh profile, nothing fetched, nothing synced: the screenshot depends on the page alone
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def build_fake_report(root: Path) -> Path:
    """report.html of the tests' fake results tree with the realistic claims file."""
    from brownformer.plots import make_figures
    from brownformer.report import build_report

    fake = _module("fake_results", ROOT / "tests" / "plots" / "fake_results.py")
    realistic = _module("realistic_claims", ROOT / "tests" / "report" / "realistic_claims.py")
    results = fake.build_fake_results(root / "results")
    realistic.write_realistic_claims(results)
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(fake.RAW_CONFIG))
    make_figures(fake.fake_config(), results, root / "figures")
    return build_report(fake.fake_config(), results, root / "figures", root / "out", config_path=config_path)


def screenshot(html: Path, out: Path, *, window: tuple[int, int] = WINDOW, timeout: int = 120) -> Path:
    """The first screen of `html` at `window` (width, height) as a PNG at `out`."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium not found: apt-get install -y chromium")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bf-chromium-") as profile:
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
               f"--screenshot={out}", Path(html).resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--html", type=Path, default=None, help="report.html to render (default: build the fake one)")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--width", type=int, default=WINDOW[0])
    p.add_argument("--height", type=int, default=WINDOW[1])
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bf-report-") as tmp:
        html = args.html or build_fake_report(Path(tmp))
        png = screenshot(html, args.out, window=(args.width, args.height))
    print(f"{png} ({png.stat().st_size / 1e3:.0f} kB) from {args.html or 'the fake results tree'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
