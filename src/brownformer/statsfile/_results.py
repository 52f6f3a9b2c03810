"""The contract's building blocks: key checking, plain-JSON output, and the scipy-shaped result objects."""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar

from brownformer.io import to_jsonable

__all__ = ["SCHEMA_VERSION", "TestResult", "EffectEstimate"]

SCHEMA_VERSION = 2
_NAN2 = (math.nan, math.nan)


def _float(x: Any) -> float:
    """A JSON number as float; null (how the writer stores NaN) as NaN."""
    return math.nan if x is None else float(x)


def _pair(x: Any) -> tuple[float, float] | None:
    return None if x is None else (_float(x[0]), _float(x[1]))


def _build(cls, d: Any, where: str, convert: dict[str, Callable] | None = None):
    """cls(**d) after checking keys: unknown or missing keys are a ValueError naming them and `where`."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    unknown, missing = sorted(set(d) - names), sorted(required - set(d))
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(
            ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else []))
            + f" (statistics file schema {SCHEMA_VERSION}, brownformer.statsfile.{cls.__name__})")
    convert = convert or {}
    return cls(**{k: convert[k](v, f"{where}.{k}") if k in convert and v is not None else v for k, v in d.items()})


def _check_version(d: Any, where: str) -> None:
    """A JSON object of this schema version, else a ValueError saying what was found and what to do."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version {d.get('schema_version')!r}, this version of brownformer reads "
                         f"{SCHEMA_VERSION} (rerun `brownformer stats run` to rewrite it)")


def _plain(obj, skip_none: bool = True) -> dict:
    """Fields as a dict: nested contract objects through their to_dict; optional fields left out when undefined
    (None, or a number JSON stores as null: the producer's NaN)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if skip_none and f.default is None and not isinstance(v, (dict, list, tuple)) and to_jsonable(v) is None:
            continue
        out[f.name] = _out(v)
    return out


def _out(v):
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, dict):
        return {k: _out(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_out(x) for x in v]
    return v


def _map(parse) -> Callable:
    return lambda d, where: {k: parse(v, f"{where}.{k}") for k, v in d.items()}


def _list(parse) -> Callable:
    return lambda xs, where: [parse(v, f"{where}[{i}]") for i, v in enumerate(xs)]


class _Record:
    """What every record of the contract shares: the JSON key is the field's name, optional fields are left out
    of the JSON when None, and `_nested` names the parser of each field that holds nested records."""

    _nested: ClassVar[dict[str, Callable]] = {}

    def to_dict(self) -> dict:
        return _plain(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None):
        """The record from its JSON or from the producer's mapping (ValueError naming `where` and any unknown or
        missing key); a record of this type is taken as it is."""
        if isinstance(d, cls):
            return d
        return _build(cls, d, where or cls.__name__, cls._nested)


@dataclass(frozen=True)
class TestResult(_Record):
    """One hypothesis test with its effect size, in scipy.stats' shape.

    Attributes:
        name: short identifier (e.g. "variance_ratio"); statistic, pvalue: as scipy names them.
        estimate: the effect size the test is about; confidence_interval: (low, high) at `confidence_level`.
        method: the test and its null distribution; n: independent units (groups of walkers) used.
        null_value: the estimate under the null; tost_interval: the (1 - 2 alpha) interval the rule reads.
        why_undefined: why the estimate is undefined (empty when defined); extra: further plain-JSON values.
        rejected: the decision at the run's alpha, recorded when the battery writes it (None before).
    """

    name: str
    statistic: float
    pvalue: float
    estimate: float = math.nan
    confidence_interval: tuple[float, float] = _NAN2
    confidence_level: float = 0.95
    method: str = ""
    n: int = 0
    null_value: float = math.nan
    tost_interval: tuple[float, float] = _NAN2
    why_undefined: str = ""
    extra: dict = field(default_factory=dict)
    rejected: bool | None = None

    def reject(self, alpha: float) -> bool:
        """True when the p-value is below `alpha` (False for a NaN p-value)."""
        return bool(math.isfinite(self.pvalue) and self.pvalue < alpha)

    def decided(self, alpha: float) -> TestResult:
        """This result with `rejected` recorded at `alpha`."""
        return TestResult(**{**{f.name: getattr(self, f.name) for f in fields(self)}, "rejected": self.reject(alpha)})

    def to_dict(self) -> dict:
        """Plain JSON: NaN (undefined) as null, the intervals as lists."""
        out = _plain(self, skip_none=False)
        out.update({k: to_jsonable(out[k]) for k in ("statistic", "pvalue", "estimate", "null_value")})
        out.update({k: [to_jsonable(float(x)) for x in out[k]] for k in ("confidence_interval", "tost_interval")})
        return out

    @classmethod
    def from_dict(cls, d: dict, where: str = "test") -> TestResult:
        if isinstance(d, cls):
            return d
        if isinstance(d, dict):  # JSON null is how the writer stores NaN
            d = {**d, **{k: _float(d[k]) for k in ("statistic", "pvalue", "estimate", "null_value") if k in d},
                 **{k: _pair(d[k]) or _NAN2 for k in ("confidence_interval", "tost_interval") if k in d}}
        return _build(cls, d, where)


@dataclass(frozen=True)
class EffectEstimate(_Record):
    """An estimate with its intervals: the MSD exponent, a key effect (with its margin), the window exponent.

    JSON nulls stay None here (an undefined estimate is None, not NaN): readers test `estimate is None`.
    """

    estimate: float | None
    confidence_interval: tuple | None = None
    tost_interval: tuple | None = None
    pvalue: float | None = None
    why_undefined: str | None = None
    margin: tuple | None = None
    key: bool | None = None
    method: str | None = None
    null: dict | None = None  # the window exponent's own rule on simulated Brownian motion
    bias_correction: float | None = None

    def interval(self) -> tuple[float, float]:
        """confidence_interval with undefined bounds as NaN."""
        return _pair(self.confidence_interval) or _NAN2

    _nested = {k: (lambda v, _: tuple(v)) for k in ("confidence_interval", "tost_interval", "margin")}
