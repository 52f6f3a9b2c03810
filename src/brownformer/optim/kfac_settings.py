"""K-FAC's settings, torch-free: name, default, rule and meaning of each, written once.

Everything else derives from :data:`SETTINGS`: the constructor's defaults and its argument check
(``kfac.KFAC``), the config keys of the two K-FAC entries of the optimizer registry (``registry``,
read by ``brownformer.config`` and ``config_replicas`` without importing torch), the JSON-schema
fragment each key must have in the config schema (tests/optim/test_kfac_settings.py) and the settings
table of docs/methods/kfac.md (:func:`markdown_table`, checked by the same test).

Defaults measured against AdamW's defaults (tests/optim/test_kfac_defaults.py; docs/methods/kfac.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Mapping

__all__ = ["Setting", "SETTINGS", "DEFAULTS", "CONFIG_DEFAULTS", "CONFIG_KEYS", "GROUP_SETTINGS", "OPTIMIZER_SETTINGS",
           "validate", "markdown_table", "ADAMW_REST_LR", "Interval", "OneOf", "Flag", "Optional", "Pair"]


# ---- rules: each checks a value, says itself in words and as a JSON-schema fragment ----------------------------------
@dataclass(frozen=True)
class Interval:
    """A real number (an integer with ``integer``) within optional bounds."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, Real) or value != value:
            return False
        if self.integer and int(value) != value:
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def coerce(self, value: Any) -> Any:
        return int(value) if self.integer else value

    @property
    def text(self) -> str:
        kind = "an int " if self.integer else ""
        if self.low is not None and self.high is not None:
            return f"{kind}in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{kind}{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{kind}{'<' if self.high_open else '<='} {self.high:g}"
        return "an int" if self.integer else "a number"

    def schema(self) -> dict:
        out: dict = {"type": "integer" if self.integer else "number"}
        if self.low is not None:
            out["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        if self.high is not None:
            out["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        return out


@dataclass(frozen=True)
class OneOf:
    """One of a few strings; ``aliases`` maps old names to their current one."""

    choices: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and (value in self.choices or value in self.aliases)

    def coerce(self, value: Any) -> Any:
        return self.aliases.get(value, value)

    @property
    def text(self) -> str:
        return "one of " + ", ".join(f"`{c}`" for c in self.choices)

    def schema(self) -> dict:
        return {"enum": [*self.choices, *self.aliases]}


@dataclass(frozen=True)
class Flag:
    """A bool."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def coerce(self, value: Any) -> Any:
        return value

    text = "a bool"

    def schema(self) -> dict:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Optional:
    """None, or a value of ``rule``."""

    rule: Interval

    def accepts(self, value: Any) -> bool:
        return value is None or self.rule.accepts(value)

    def coerce(self, value: Any) -> Any:
        return None if value is None else self.rule.coerce(value)

    @property
    def text(self) -> str:
        return f"{self.rule.text} or None"

    def schema(self) -> dict:
        inner = self.rule.schema()
        return {**inner, "type": [inner["type"], "null"]}


@dataclass(frozen=True)
class Pair:
    """Two values of ``rule`` (a list or tuple; stored as a tuple)."""

    rule: Interval

    def accepts(self, value: Any) -> bool:
        return isinstance(value, (list, tuple)) and len(value) == 2 and all(self.rule.accepts(v) for v in value)

    def coerce(self, value: Any) -> Any:
        return tuple(self.rule.coerce(v) for v in value)

    @property
    def text(self) -> str:
        return f"two numbers {self.rule.text}"

    def schema(self) -> dict:
        return {"type": "array", "items": self.rule.schema(), "minItems": 2, "maxItems": 2}


# ---- the table --------------------------------------------------------------------------------------------------------
_SAME = object()  # Setting.config_default's marker: a config that omits the key gets the constructor's default


@dataclass(frozen=True)
class Setting:
    """One constructor argument of ``KFAC``.

    ``kind``: ``"group"`` (a param-group setting, like ``lr``: a schedule may edit it), ``"optimizer"`` (an attribute
    of the optimizer, saved in its ``state_dict``) or ``"build"`` (read once, to find the layers and groups).
    ``config``: the config may give it (``optimizers.<name>.<key>``; ``lr`` and ``inverse`` have their own places:
    the entry's ``lr`` and its ``type``). ``shared``: the schema's entry also serves other optimizers (SGD, AdamW),
    so its fragment there is theirs too. ``reason``: why this default (one line, a measurement where there is one).
    ``config_default``: the value an optimizer built from a config (``registry``) takes when the config omits the
    key, where that differs from ``default``: the default the config's runs were trained and tuned with before the
    constructor's default changed, so that changing the README snippet's default retrains no run
    (:data:`CONFIG_DEFAULTS`); :data:`_SAME` (the usual case): ``default``.
    """

    name: str
    default: Any
    rule: Interval | OneOf | Flag | Optional | Pair
    doc: str
    kind: str
    config: bool = True
    shared: bool = False
    reason: str = ""
    config_default: Any = field(default=_SAME, repr=False)

    def check(self, value: Any) -> Any:
        """``value`` coerced (an int for an integer rule, a tuple for a pair, an alias resolved).

        Raises:
            ValueError: naming the setting, its rule and the value.
        """
        if not self.rule.accepts(value):
            raise ValueError(f"{self.name} must be {self.rule.text}, got {value!r}")
        return self.rule.coerce(value)


_PROBABILITY = Interval(0, 1, high_open=True)
_POSITIVE = Interval(0, low_open=True)
_NON_NEGATIVE = Interval(0)
_COUNT = Interval(1, integer=True)

SETTINGS: tuple[Setting, ...] = (
    Setting("lr", 0.03, _NON_NEGATIVE, "learning rate of the preconditioned layers", "group", config=False,
            reason="README snippet test; 0.1 made the bound set every step and the held-out loss rise late"),
    Setting("damping", 1e-2, _POSITIVE,
            "starting damping lambda of G X A + lambda X = V (adapted during training)", "group",
            reason="1e-3 let the exact eigen solve amplify low-curvature directions until the bound set every step "
                   "(transformer: held-out loss 1.40 at lr 0.003 vs 0.26 at damping 0.1)"),
    Setting("momentum", 0.5, _PROBABILITY, "heavy-ball momentum on the preconditioned step", "group", shared=True,
            reason="the bound acts on each step's X; 0.9 adds ~10 bound steps: small transformer held-out loss "
                   "0.33 (cg) / 0.26 (eigen) at 0.9 vs 0.11 / 0.13 at 0.5"),
    Setting("weight_decay", 0.0, _NON_NEGATIVE, "weight decay (coupled for SGD, decoupled for AdamW)", "group",
            shared=True),
    Setting("kl_clip", 1e-3, Optional(_POSITIVE),
            "bound on the preconditioned step (kfac-pytorch's KL-clip, scaled with the lr schedule); null: no bound",
            "group", reason="kfac-pytorch's default; without it the small transformer diverged"),
    Setting("betas", (0.9, 0.999), Pair(_PROBABILITY), "AdamW (beta1, beta2) of the rest update", "group",
            shared=True),
    Setting("eps", 1e-8, _POSITIVE, "AdamW denominator epsilon of the rest update", "group", shared=True),
    Setting("inverse", "eigen", OneOf(("eigen", "cg")),
            "the solve: exact from amortised eigendecompositions, or truncated CG (the paper's iterative K-FAC)",
            "optimizer", config=False),
    Setting("factor_decay", 0.95, _PROBABILITY, "running-average decay of the Kronecker factors per step",
            "optimizer"),
    Setting("factor_every", 20, _COUNT, "update the factors every this many steps", "optimizer",
            reason="the README snippet's problems train as well as at 5 (held-out loss over AdamW's, seeds 0-7, with "
                   "adapt_every 10: MLP <= 0.10, transformer <= 0.77; at 5 <= 0.09 and <= 0.84) in less time per step "
                   "(benchmarks/results/kfac_snippet_defaults.md); configs keep the 5 they were tuned with",
            config_default=5),
    Setting("inverse_every", 20, _COUNT, "eigendecompose every this many steps (eigen only)", "optimizer",
            reason="factor_every: a refresh between two factor updates decomposes the same factors (the snippet's "
                   "losses equal 10's)", config_default=10),
    Setting("cg_max_iter", 10, _COUNT, "conjugate-gradient iterations per step at most (iterative only)", "optimizer",
            reason="the author's code"),
    Setting("cg_tol", 1e-2, _POSITIVE, "relative residual that stops a system's CG (iterative only)", "optimizer",
            reason="the author's code"),
    Setting("curvature", "factored", OneOf(("factored", "matrix-free")),
            "CG on the running factors, or on this step's rows without forming A or G (iterative only)",
            "optimizer", reason="matrix-free uses one batch only and its Jacobi preconditioner leaves more iterations "
            "(benchmarks/results/kfac_cost_study.md)"),
    Setting("curvature_rows", 64, _COUNT, "tokens (rows) of a step the curvature keeps (matrix-free only)", "optimizer",
            reason="below (out + in) / 2 of a width-64 layer, where a matrix-free product is cheaper"),
    Setting("warm_start", False, Flag(), "start CG from the previous step's solution (iterative only)", "optimizer",
            reason="costs one operator application; the Kronecker preconditioner's first iterate is already close"),
    Setting("weight_sharing", "expand", OneOf(("expand", "reduce")),
            "tokens as extra examples (expand) or summed per sequence (reduce)", "optimizer"),
    Setting("fisher", "sampled", OneOf(("sampled", "empirical"), aliases={"mc": "sampled"}),
            "labels sampled from the model (true Fisher; mc is its old name) or the training labels", "optimizer",
            reason="the true Fisher (issue 18)"),
    Setting("loss_reduction", "mean", OneOf(("mean", "batch")),
            "the loss averages every row of the model output (mean) or only the batch", "optimizer"),
    Setting("adapt_every", 10, Interval(0, integer=True),
            "Levenberg-Marquardt damping adaptation and snapshot period in steps (0: off)", "optimizer",
            reason="half the closure re-evaluations and host checks of kfac-jax's 5 at the snippet's losses above; a "
                   "failed step is handled up to 10 steps later; configs keep 5", config_default=5),
    Setting("max_failures", 5, Interval(0, integer=True),
            "consecutive failed checks before the run stops with an error", "optimizer"),
    Setting("relative_damping", False, Flag(), "each layer's damping is `damping` times its mean Kronecker eigenvalue",
            "optimizer", reason="the tuned dampings are absolute; relative, the start must be re-tuned in its own units "
            "(benchmarks/results/kfac_damping.md)"),
    Setting("relative_damping_floor", 1e-4, _NON_NEGATIVE,
            "with relative_damping, each layer's lambda is at least this fraction of `damping` times the mean over "
            "layers of their mean Kronecker eigenvalues", "optimizer",
            reason="bounds the spread of the layers' amplification to 1e4 (vit-post's first Q/K start at 1e-15 of the "
            "head's scale); vit-pre trains as unfloored (60/50 steps), 1e-2 slows it (100/140); no floor tried made "
            "vit-post train (benchmarks/results/kfac_damping.md)"),
    Setting("lm_scope", "whole", OneOf(("whole", "preconditioned")),
            "what Levenberg-Marquardt's reduction ratio judges: the whole update (the rest update in the model "
            "linearly) or the preconditioned layers' part (the loss re-evaluated with the rest as before the step)",
            "optimizer", reason="the tuned settings were chosen with it (benchmarks/results/kfac_damping.md)"),
    Setting("layer_step_bound", None, Optional(_POSITIVE),
            "per-layer trust region: each preconditioned layer's step lr x nu x X_l (before momentum) is at most this "
            "fraction of the norm of its [W_l, b_l]; null: no bound", "optimizer",
            reason="off so the tuned settings keep their steps; the KL bound cannot see a step whose layer has almost no "
            "curvature (post-LN MLPs' weights grew 10-70x in 5 steps under relative damping and the ViT died); 0.05-0.1 "
            "train both ViTs with relative damping 0.5, 0.2 leaves vit-post at chance (benchmarks/results/"
            "kfac_damping_vitpost.md)"),
    Setting("per_head", False, Flag(), "one block per attention head instead of per Q/K/V matrix", "build"),
    Setting("scope", "all", OneOf(("all", "attention", "mlp")), "which nn.Linear layers it preconditions", "build"),
    Setting("rest_update", "adamw", OneOf(("sgd", "adamw")), "update of the parameters it does not precondition",
            "build", reason="LayerNorm and positions by SGD left ViTs at chance (issue 11 tuning)"),
    Setting("rest_lr", None, Optional(_NON_NEGATIVE),
            "lr of the parameters it does not precondition (null: torch.optim.AdamW's default with AdamW, lr with SGD)",
            "build"),
    Setting("n_heads", None, Optional(_COUNT), "head count for per_head (else read from the attention module)",
            "build", config=False),
    Setting("seed", 0, Interval(integer=True), "seed of the generator that samples the labels of the sampled Fisher",
            "build", config=False),
)

_BY_NAME = {s.name: s for s in SETTINGS}
DEFAULTS: Mapping[str, Any] = {s.name: s.default for s in SETTINGS}
# what a config-built optimizer takes for a key its config omits, where that is not DEFAULTS (registry._kfac)
CONFIG_DEFAULTS: Mapping[str, Any] = {s.name: s.config_default for s in SETTINGS if s.config_default is not _SAME}
CONFIG_KEYS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.config)
GROUP_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.kind == "group")
OPTIMIZER_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.kind == "optimizer")
# the rest update's lr when rest_lr is None and the rest update is AdamW: torch.optim.AdamW's default
ADAMW_REST_LR = 1e-3


def validate(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting of :data:`SETTINGS` checked and coerced (:meth:`Setting.check`); missing ones get their default.

    Raises:
        ValueError: an unknown name, or a value outside its setting's rule (the message names the setting).
    """
    unknown = sorted(set(values) - set(_BY_NAME))
    if unknown:
        raise ValueError(f"unknown K-FAC setting(s) {', '.join(unknown)}; known: {', '.join(_BY_NAME)}")
    return {s.name: s.check(values.get(s.name, s.default)) for s in SETTINGS}


def markdown_table() -> str:
    """The settings table of docs/methods/kfac.md: setting, default, rule, meaning and why."""
    def shown(value):
        return "None" if value is None else f"`{value!r}`" if isinstance(value, str) else f"`{value}`"
    rows = ["| setting | default | rule | meaning | why this default |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {shown(s.default)}{'' if s.config_default is _SAME else f' (config: {shown(s.config_default)})'} "
             f"| {s.rule.text} | {s.doc} | {s.reason} |" for s in SETTINGS]
    return "\n".join(rows)
