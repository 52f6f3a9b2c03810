"""The contract's building blocks: key checking, plain-JSON output, and the scipy-shaped result objects."""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Callable, ClassVar

from brownformer.io import to_jsonable

__all__ = ["SCHEMA_VERSION", "EffectResult", "EffectExtra", "WindowRuleNull", "Decision", "CLAIM_VERDICTS", "RULE_VERDICTS",
           "Record", "Keyed", "KeyedValue", "check_keys", "build_record", "check_version", "list_of", "plain_value"]

SCHEMA_VERSION = 2

#: the two vocabularies a decision is taken in, written once here (the lowest layer both readers and writers import):
#: a claim's verdict (claims.json; brownformer.verdicts re-exports it) and the Brownian rule's verdict on one file
#: (brownformer.stats.diffusion.rule re-exports it)
CLAIM_VERDICTS = ("supported", "not supported", "inconclusive", "did not train")
RULE_VERDICTS = ("brownian", "not brownian", "inconclusive")
_NAN2 = (math.nan, math.nan)


def _float(x: Any) -> float:
    """A JSON number as float; null (how the writer stores NaN) as NaN."""
    return math.nan if x is None else float(x)


def _num(x: Any) -> float:
    """A finite number as float, anything else (null, a string, a bool, inf) as NaN."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else math.nan


def _finite(x: Any) -> float | None:
    """A finite float as it is; anything else (NaN, inf, a non-float) as null."""
    return x if isinstance(x, float) and math.isfinite(x) else None


def _pair(x: Any) -> tuple[float, float] | None:
    return None if x is None else (_float(x[0]), _float(x[1]))


def check_keys(cls, d: Any, where: str, schema: str, *, optional: frozenset[str] = frozenset()) -> None:
    """That `d` is a JSON object with no key outside the dataclass `cls`'s fields and every required one (a field
    without a default, not named in `optional`): else a ValueError naming the unknown and missing keys, `where`,
    and `schema` (which contract). The key check of every record of the package (statsfile's and claims.json's)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls)
                if f.default is MISSING and f.default_factory is MISSING and f.name not in optional}
    unknown, missing = sorted(set(d) - names), sorted(required - set(d))
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(
            ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else []))
            + f" ({schema})")


def build_record(cls, d: Any, where: str, convert: dict[str, Callable] | None = None):
    """cls(**d) after checking keys (`check_keys`); `convert` parses the named fields (each called as
    parse(value, where))."""
    check_keys(cls, d, where, f"statistics file schema {SCHEMA_VERSION}, brownformer.statsfile.{cls.__name__}")
    convert = convert or {}
    return cls(**{k: convert[k](v, f"{where}.{k}") if k in convert and v is not None else v for k, v in d.items()})


def check_version(d: Any, where: str) -> None:
    """A JSON object of this schema version, else a ValueError saying what was found and what to do."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version {d.get('schema_version')!r}, this version of brownformer reads "
                         f"{SCHEMA_VERSION} (rerun `brownformer stats run` to rewrite it)")


def _plain(obj, skip_none: bool = True) -> dict:
    """Fields as a dict: nested contract objects through their to_dict; optional fields left out when undefined
    (None, or a number JSON stores as null: the producer's NaN); a record's own key (`_key`, see Keyed) left out."""
    out = {}
    own_key = getattr(obj, "_key", None)
    for f in fields(obj):
        if f.name == own_key:
            continue
        v = getattr(obj, f.name)
        if skip_none and f.default is None and not isinstance(v, (dict, list, tuple)) and to_jsonable(v) is None:
            continue
        out[f.name] = plain_value(v)
    return out


def plain_value(v):
    """A field's value as plain JSON structure: contract objects through their to_dict, mappings and sequences
    element-wise (numbers are left to brownformer.io.to_jsonable at write time)."""
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, dict):
        return {k: plain_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain_value(x) for x in v]
    return v


def list_of(parse) -> Callable:
    """The parser of a list whose items `parse` reads."""
    return lambda xs, where: [parse(v, f"{where}[{i}]") for i, v in enumerate(xs)]


class Record:
    """What every record of the contract shares: the JSON key is the field's name, optional fields are left out
    of the JSON when None, and `_nested` names the parser of each field that holds nested records. A record held in a
    `Keyed` tuple names in `_key` the field that carries its key (written as the JSON object's key, not inside it)."""

    _nested: ClassVar[dict[str, Callable]] = {}
    _key: ClassVar[str | None] = None

    def to_dict(self) -> dict:
        return _plain(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None):
        """The record from its JSON or from the producer's mapping (ValueError naming `where` and any unknown or
        missing key); a record of this type is taken as it is."""
        if isinstance(d, cls):
            return d
        return build_record(cls, d, where or cls.__name__, cls._nested)


class Keyed(tuple):
    """Records whose keys the data choose (a test's or a clock's name, a token type, an alternative process, a
    quantity), in the order written, each carrying its key in the field its class's `_key` names. JSON writes them as
    one object by key, the layout the files have always had; `parser` reads it back.

    `get(key)` and `[key]` find a record by its key (a string; an int indexes the tuple as usual); `keys()` lists them.
    """

    def _find(self, key: str):
        return next((r for r in self if getattr(r, r._key) == key), None)

    def get(self, key: str, default=None):
        found = self._find(key)
        return default if found is None else found

    def __getitem__(self, key):
        if not isinstance(key, str):
            return tuple.__getitem__(self, key)
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key) -> bool:
        return self._find(key) is not None if isinstance(key, str) else tuple.__contains__(self, key)

    def keys(self) -> list[str]:
        return [getattr(r, r._key) for r in self]

    def to_dict(self) -> dict:
        return {getattr(r, r._key): r.to_dict() for r in self}

    @classmethod
    def of(cls, records) -> Keyed:
        """The records (each with its key set) as a Keyed tuple; a ValueError names a key given twice."""
        out = cls(records)
        keys = out.keys()
        if len(set(keys)) != len(keys):
            raise ValueError(f"keys given twice: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
        return out

    @classmethod
    def parser(cls, parse: Callable) -> Callable:
        """The `_nested` parser of a JSON object by key whose values `parse` reads (called as parse(value, where)):
        each record gets its key in its `_key` field."""
        def read(d, where):
            if not isinstance(d, dict):
                raise ValueError(f"{where}: expected a JSON object by key, got {type(d).__name__}")
            return cls.of(_with_key(parse(v, f"{where}.{k}"), k) for k, v in d.items())
        return read


def _with_key(record, key: str):
    return replace(record, **{record._key: key})


@dataclass(frozen=True)
class KeyedValue:
    """One plain value (a rate, a margin's (low, high)) under a key the data choose, in a Keyed tuple: its JSON is
    the value itself (a calibration's power by alternative, a verdict's rate, a margin by name)."""

    value: Any
    key: str = ""
    _key: ClassVar[str] = "key"

    def to_dict(self):
        return plain_value(self.value)

    @classmethod
    def from_dict(cls, v: Any, where: str | None = None) -> KeyedValue:
        return v if isinstance(v, cls) else cls(v)

    @classmethod
    def mapping(cls, d: dict) -> Keyed:
        """A producer's {key: value} as a Keyed tuple of KeyedValue."""
        return Keyed.of(cls(v, str(k)) for k, v in d.items())


@dataclass(frozen=True)
class EffectExtra(Record):
    """What a test reports beyond scipy's fields (EffectResult.extra), each present only for the tests that have it:
    the variance ratio's lag `q` and the mean real lags at q and 1 (stats/diffusion/battery.py variance_ratio), the
    increment autocorrelations by lag (`acf`), the tail index's Hill estimate and order `k`
    (stats/diffusion/descriptive.py), and the time points an exponent was fitted on (`n_time_points`)."""

    q: int | None = None
    mean_real_lag_q: float | None = None
    mean_real_lag_1: float | None = None
    acf: Any = None
    hill: float | None = None
    k: int | None = None
    n_time_points: int | None = None

    def to_dict(self) -> dict:
        """The values the test has (a NaN one written, as null: only an absent value is left out)."""
        return {f.name: plain_value(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class WindowRuleNull(Record):
    """The window exponent's own rule on Brownian motion simulated at a file's shape over the window
    (stats/diffusion/window_reading.py): how often it rejects (`size`) and certifies (`equivalence_power`) in
    `n_replicates`, the simulated exponent's 2.5, 50 and 97.5% quantiles, and `what` it is."""

    size: float
    equivalence_power: float
    n_replicates: int
    quantiles: list
    what: str


#: JSON layouts of an EffectResult: (required keys, keys in the order written). "test": one hypothesis test, every
#: key written (NaN as null); "effect": an estimate with what is known of it (a key effect with its margin, the MSD
#: exponent, the window exponent), unset keys left out; "headline": a claim's effect size in claims.json, the
#: estimate under the key "value".
_TEST_KEYS = ("name", "statistic", "pvalue", "estimate", "confidence_interval", "confidence_level", "method", "n",
              "null_value", "tost_interval", "why_undefined", "extra", "rejected")
_EFFECT_KEYS = ("estimate", "confidence_interval", "tost_interval", "pvalue", "why_undefined", "margin", "key",
                "method", "null", "bias_correction")
_FORMS = {"test": ({"name", "statistic", "pvalue"}, _TEST_KEYS), "effect": ({"estimate"}, _EFFECT_KEYS),
          "headline": (set(), ("name", "value", "confidence_interval", "confidence_level"))}
_TEST_DEFAULTS = {"estimate": math.nan, "confidence_interval": _NAN2, "confidence_level": 0.95, "method": "", "n": 0,
                  "null_value": math.nan, "tost_interval": _NAN2, "why_undefined": ""}
_PAIRS = ("confidence_interval", "tost_interval", "margin")


@dataclass(frozen=True)
class EffectResult:
    """One effect, in scipy.stats' shape: a test (`statistic`, `pvalue`), the effect size it is about (`estimate`,
    `confidence_interval` at `confidence_level`) and what else is known of it. The one effect type of the package:
    the battery's tests, its key effects, the MSD and window exponents and each claim's headline estimate.

    Attributes:
        name: short identifier (e.g. "variance_ratio"); statistic, pvalue: as scipy names them.
        estimate: the effect size; confidence_interval: (low, high) at `confidence_level`.
        method: the test and its null distribution; n: independent units (groups of walkers) used.
        null_value: the estimate under the null; tost_interval: the (1 - 2 alpha) interval the rule reads.
        why_undefined: why the estimate is undefined (empty when defined); extra: what else the test reports
            (EffectExtra).
        rejected: the decision at the run's alpha, recorded when the battery writes it (None before).
        margin: the equivalence margin of a key effect; key: whether it decides; null: the window exponent's own
            rule on simulated Brownian motion; bias_correction: what was subtracted from the estimate.
        form: its JSON layout (_FORMS): "test" (the default: a test fills scipy's defaults, NaN where undefined),
            "effect" (None where unknown, left out of the JSON) or "headline" (claims.json's estimate).
    """

    name: str | None = None
    statistic: float | None = None
    pvalue: float | None = None
    estimate: float | None = None
    confidence_interval: tuple | None = None
    confidence_level: float | None = None
    method: str | None = None
    n: int | None = None
    null_value: float | None = None
    tost_interval: tuple | None = None
    why_undefined: str | None = None
    extra: EffectExtra = field(default_factory=EffectExtra)
    rejected: bool | None = None
    margin: tuple | None = None
    key: bool | None = None
    null: WindowRuleNull | None = None
    bias_correction: float | None = None
    form: str = field(default="test", kw_only=True)
    _key: ClassVar[str] = "name"  # in a Keyed tuple (a file's key effects, its clock check)

    def __post_init__(self):
        if self.form not in _FORMS:
            raise ValueError(f"EffectResult form {self.form!r} is not one of {sorted(_FORMS)}")
        if self.form == "test":
            for k, v in _TEST_DEFAULTS.items():
                if getattr(self, k) is None:
                    object.__setattr__(self, k, v)

    @classmethod
    def headline(cls, name: str, estimate: float, confidence_interval: tuple[float, float],
                 confidence_level: float | None = None) -> EffectResult:
        """A claim's headline effect size (claims.json "estimate")."""
        return cls(name, estimate=estimate, confidence_interval=confidence_interval,
                   confidence_level=confidence_level, form="headline")

    @classmethod
    def effect(cls, estimate: float | None, confidence_interval: tuple | None = None, tost_interval: tuple | None = None,
               pvalue: float | None = None, **known) -> EffectResult:
        """An estimate with what is known of it (the "effect" layout: unknown fields stay None, left out of JSON)."""
        return cls(estimate=estimate, confidence_interval=confidence_interval, tost_interval=tost_interval,
                   pvalue=pvalue, **known, form="effect")

    def interval(self) -> tuple[float, float]:
        """confidence_interval with undefined bounds as NaN."""
        return _pair(self.confidence_interval) or _NAN2

    def reject(self, alpha: float) -> bool:
        """True when the p-value is below `alpha` (False for a NaN p-value)."""
        return bool(self.pvalue is not None and math.isfinite(self.pvalue) and self.pvalue < alpha)

    def decided(self, alpha: float) -> EffectResult:
        """This result with `rejected` recorded at `alpha`."""
        return replace(self, rejected=self.reject(alpha))

    def to_dict(self) -> dict:
        """Plain JSON in this result's layout (NaN and inf as null, intervals as lists)."""
        if self.form == "headline":
            lo, hi = self.confidence_interval
            return {"name": self.name, "value": _finite(self.estimate), "confidence_interval": [_finite(lo), _finite(hi)],
                    "confidence_level": self.confidence_level}
        if self.form == "test":
            out = {k: plain_value(getattr(self, k)) for k in _TEST_KEYS}
            out.update({k: to_jsonable(out[k]) for k in ("statistic", "pvalue", "estimate", "null_value")})
            out.update({k: [to_jsonable(float(x)) for x in out[k]] for k in ("confidence_interval", "tost_interval")})
            return out
        out = {}
        for k in _EFFECT_KEYS:
            v = getattr(self, k)
            if k == "estimate" or isinstance(v, (dict, list, tuple)) or to_jsonable(v) is not None:
                out[k] = plain_value(v)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "test", form: str = "test") -> EffectResult | None:
        """The result from its JSON in layout `form` (ValueError naming `where` and any unknown or missing key);
        a headline's empty or null estimate is None."""
        if isinstance(d, cls):
            return d
        if form == "headline":
            if not d:
                return None
            ci = d.get("confidence_interval") or [None, None]
            return cls.headline(str(d.get("name", "")), _num(d.get("value")), (_num(ci[0]), _num(ci[1])),
                                d.get("confidence_level"))
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
        required, keys = _FORMS[form]
        unknown, missing = sorted(set(d) - set(keys)), sorted(required - set(d))
        if unknown or missing:
            raise ValueError(f"{where}: " + "; ".join(
                ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else []))
                + f" (statistics file schema {SCHEMA_VERSION}, brownformer.statsfile.EffectResult, {form} layout)")
        d = {k: tuple(v) if k in _PAIRS and v is not None else v for k, v in d.items()}
        if d.get("null") is not None:
            d["null"] = WindowRuleNull.from_dict(d["null"], f"{where}.null")
        if "extra" in d:
            d["extra"] = EffectExtra.from_dict(d["extra"] or {}, f"{where}.extra")
        if form == "test":  # JSON null is how the writer stores NaN
            d.update({k: _float(d[k]) for k in ("statistic", "pvalue", "estimate", "null_value") if k in d})
            d.update({k: _pair(d[k]) or _NAN2 for k in ("confidence_interval", "tost_interval") if k in d})
        return cls(**d, form=form)

    @classmethod
    def effect_from_dict(cls, d: Any, where: str = "effect") -> EffectResult:
        """from_dict in the "effect" layout (JSON nulls stay None: readers test `estimate is None`)."""
        return cls.from_dict(d, where, form="effect")


@dataclass(frozen=True)
class Decision(Record):
    """A verdict taken once, with why: what a rule decided about one file, one configuration or one claim.

    Readers take the decision as written; nothing downstream re-decides from the estimates.

    Attributes:
        verdict: one of CLAIM_VERDICTS or RULE_VERDICTS.
        reason: one sentence, from the data (what decided it, or what is missing).
        rule: the rule that decided (e.g. "window exponent TOST", "intersection-union over configurations").
        alpha: the level it was taken at; size, power: the rule's simulated size and power at the data's shape,
            where calibrated (None where not).
    """

    verdict: str
    reason: str = ""
    rule: str | None = None
    alpha: float | None = None
    size: float | None = None
    power: float | None = None

    def __post_init__(self):
        if self.verdict not in CLAIM_VERDICTS + RULE_VERDICTS:
            raise ValueError(f"Decision verdict {self.verdict!r} is not one of {list(CLAIM_VERDICTS + RULE_VERDICTS)}")
