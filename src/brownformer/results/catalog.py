"""The figure catalog: one entry per figure, the only list of figures in the project.

Each `Figure` holds its file stem, title, drawing function (a "module:function" reference that
brownformer.plots resolves, so this module imports no plotting library and Snakemake can read it
cheaply), caption file (workflow/report/<caption>, shown by `snakemake --report` and by the
report) and report group (the key of the report section it is shown in, one of
brownformer.report.sections.SECTIONS; a report test checks that every group has a section).
workflow/rules/figures.smk, the report and the figure tests all iterate over FIGURES; figure
numbers are the catalog order.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Figure", "FIGURES"]


@dataclass(frozen=True)
class Figure:
    """One figure of the report.

    Attributes:
        stem: file name without suffix: figures/<stem>.png and .svg.
        title: one line, shown above the caption.
        draw: "module:function" in brownformer.plots; the function takes the results reader and
            returns a matplotlib Figure.
        caption: file name of the caption in workflow/report/.
        group: the key of the report section it is shown in.
    """
    stem: str
    title: str
    draw: str
    caption: str
    group: str

    def __post_init__(self):
        if ":" not in self.draw:
            raise ValueError(f"figure {self.stem!r}: draw {self.draw!r} is not 'module:function'")


_ENTRIES = (  # in the order the report shows them: their figure numbers
    # first: the report's key figure, right under the verdict table
    Figure("claims_overview", "Verdict per claim, run and optimizer",
           "brownformer.plots.fig_calibration:plot_claims_overview", "claims_overview.rst", "overview"),
    Figure("training_curves",
           "Training curves: loss and accuracy (bits per character for text) against steps and wall-clock",
           "brownformer.plots.fig_training:plot_training_curves", "training_curves.rst", "training"),
    Figure("time_to_target", "Steps and seconds to reach the target optimizer's final validation metric, "
           "and K-FAC overhead", "brownformer.plots.fig_training:plot_time_to_target", "time_to_target.rst", "training"),
    Figure("sphere_norms", "Norms of LayerNorm outputs before and after the affine map",
           "brownformer.plots.fig_sphere:plot_sphere_norms", "sphere_norms.rst", "1"),
    Figure("markov_spectra",
           "Attention as a Markov chain: spectral gap, stationary entropy, reversibility, Dobrushin",
           "brownformer.plots.fig_markov:plot_markov_spectra", "markov_spectra.rst", "2"),
    Figure("depth_cosine", "Depth trajectories: mean cosine against the spherical Brownian law; Gram off-diagonal",
           "brownformer.plots.fig_depth:plot_depth_cosine", "depth_cosine.rst", "3a"),
    Figure("training_msd", "Training trajectories: mean squared displacement, variance ratio and Hurst exponents",
           "brownformer.plots.fig_trajectories:plot_training_msd", "training_msd.rst", "3b"),
    Figure("local_slopes", "Claim 3 on its pre-fixed window: local slopes against the Brownian null envelope, "
           "window exponents, per-walker exponents by token type",
           "brownformer.plots.fig_local_slopes:plot_local_slopes", "local_slopes.rst", "3b"),
    Figure("increments_tails",
           "Increment distributions and tail indices against matched Gaussian surrogates; gradient noise",
           "brownformer.plots.fig_trajectories:plot_increments_tails", "increments_tails.rst", "3b"),
    Figure("calibration",
           "Calibration of the test battery: size on Brownian motion and power against alternatives",
           "brownformer.plots.fig_calibration:plot_calibration", "calibration.rst", "calibration"),
    Figure("scaling", "Claims against depth and width: each claim's key statistic with its CI",
           "brownformer.plots.fig_scaling:plot_scaling", "scaling.rst", "scaling"),
)

#: stem -> Figure, in figure-number order
FIGURES: dict[str, Figure] = {f.stem: f for f in _ENTRIES}
if len(FIGURES) != len(_ENTRIES):
    raise ValueError("two figures share a stem in brownformer.results.catalog")
