"""The blocks of an attention file's statistics (files.py AttentionStats; stats/markov/markov_chain.py builds them):
the per-matrix quantities and their aggregates, the heads' weight kernels, the vMF fits in the heads' subspaces and of
the head-averaged attention, and the null models."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Generic, Iterator, TypeVar

from ._results import Record, list_of

__all__ = ["QUANTITY_NAMES", "ByQuantity", "MatrixAggregate", "QuantityAggregates", "HeadIsotropy", "SubspaceFit",
           "HeadAveragedFit", "HeadKernels", "NullModels"]

V = TypeVar("V")
W = TypeVar("W")


class _SetFields:
    """The fields of a record of optional blocks that are set, in the order written."""

    def items(self) -> Iterator[tuple[str, object]]:
        """(name, value) of every field that is not None."""
        return ((f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None)


@dataclass(frozen=True)
class ByQuantity(_SetFields, Record, Generic[V]):
    """One value per per-matrix quantity of attention matrices, in the order written (None: not computed, left out).

    The chain's (markov_chain.chain_statistics: stationary_entropy_normalized without a causal mask,
    mean_absorption_time with one) and the vMF kernel fit's (kernel_fit.vmf_scores). The value is a quantity's
    per-matrix values (AttentionStats.per_matrix: a list; the statistics' arrays before), its aggregate
    (QuantityAggregates), why it is undefined (a str) or its uniform chain's value (a float)."""

    spectral_gap: V | None = None
    dobrushin: V | None = None
    doubly_stochastic_deviation: V | None = None
    stationary_entropy: V | None = None
    entropy_rate: V | None = None
    reversibility_residual: V | None = None
    entropy_production: V | None = None
    stationary_entropy_normalized: V | None = None
    mean_absorption_time: V | None = None
    vmf_kappa: V | None = None
    vmf_kl: V | None = None
    vmf_kl_uniform: V | None = None
    vmf_explained_vs_uniform: V | None = None
    vmf_output_error: V | None = None

    def get(self, quantity: str, default=None):
        """The value of a quantity named at run time (`default` when not computed).

        Raises:
            ValueError: a name that is no quantity (a misspelt name is an error, not a silent default).
        """
        if quantity not in QUANTITY_NAMES:
            raise ValueError(f"{quantity!r} is not an attention quantity (one of {list(QUANTITY_NAMES)})")
        value = getattr(self, quantity)
        return default if value is None else value

    def map(self, fn: Callable[[V], W]) -> ByQuantity[W]:
        """fn of every value that is set (None stays None)."""
        return ByQuantity(**{k: fn(v) for k, v in self.items()})

    def merged(self, other: ByQuantity[V]) -> ByQuantity[V]:
        """These values with those set in `other` added (other's win), of this record's type."""
        return type(self)(**{**dict(self.items()), **dict(other.items())})


#: every per-matrix quantity of an attention file, in the order written
QUANTITY_NAMES = tuple(f.name for f in fields(ByQuantity))


@dataclass(frozen=True, kw_only=True)
class MatrixAggregate(Record):
    """One quantity over matrices (markov_chain._aggregate): the mean with its percentile-bootstrap interval, the
    median, the sd and the number of finite values (no finite value: mean and median null, no sd, n 0)."""

    mean: float | None
    confidence_interval: list
    median: float | None
    sd: float | None = None
    n: int


class QuantityAggregates(ByQuantity[MatrixAggregate]):
    """A MatrixAggregate per quantity (an attention file's "aggregate", each null model's, a fit's)."""

    _nested = {name: MatrixAggregate.from_dict for name in QUANTITY_NAMES}


@dataclass(frozen=True)
class HeadIsotropy(Record):
    """One layer's logit forms M_h = W_Q,h^T W_K,h / sqrt(d_h) (markov_chain.weight_isotropy): per head the identity
    fraction, its rank bound d_h/d and the fraction relative to it, the asymmetry, the subspace basis and the
    equivalent kappa; the heads' means, the heads' mean form's identity fraction, whether a LayerNorm gain was
    folded in."""

    identity_fraction: list
    rank_bound: float
    identity_fraction_relative: list
    asymmetry: list
    n_heads: int
    d: int
    d_head: int
    identity_fraction_mean: float
    asymmetry_mean: float
    head_mean_identity_fraction: float
    gain_folded: bool
    subspace_basis: list  # per head, (d_h, d) orthonormal rows
    kappa_equivalent: list


@dataclass(frozen=True)
class SubspaceFit(Record):
    """The vMF fit inside each head's subspace (markov_chain.head_subspace_vmf): vmf_kappa and vmf_output_error per
    matrix in the attention's order and aggregated, the attention's shape, whether every layer's gain was folded in,
    the method; or only why it is undefined."""

    per_matrix: ByQuantity[list] | None = None
    aggregate: QuantityAggregates | None = None
    shape: list | None = None
    gain_folded: bool | None = None
    method: str | None = None
    why_undefined: str | None = None

    _nested = {"per_matrix": ByQuantity.from_dict, "aggregate": QuantityAggregates.from_dict}


@dataclass(frozen=True)
class HeadAveragedFit(Record):
    """The vMF fit of the head-averaged attention mean_h A_h (markov_chain.analyze_attention with a head axis): its
    shape (without the head axis), the fit's per-matrix values and aggregates."""

    shape: list
    per_matrix: ByQuantity[list]
    aggregate: QuantityAggregates

    _nested = {"per_matrix": ByQuantity.from_dict, "aggregate": QuantityAggregates.from_dict}


@dataclass(frozen=True)
class HeadKernels(Record):
    """The heads' weight kernels of an attention file: weight_isotropy per layer, where the weights were read, the
    vMF fit in each head's subspace (where the stage fitted it); or only why they are undefined."""

    per_layer: list[HeadIsotropy] | None = None
    source: str | None = None
    subspace_vmf: SubspaceFit | None = None
    why_undefined: str | None = None

    _nested = {"per_layer": list_of(HeadIsotropy.from_dict), "subspace_vmf": SubspaceFit.from_dict}


@dataclass(frozen=True)
class NullModels(_SetFields, Record):
    """The aggregates of the statistics under each null model (markov_chain.attention_null_models; files.py
    NullModelsInfo says what each is), and of the exact vMF alternative; a null not computed is None."""

    row_shuffled: QuantityAggregates | None = None
    shuffled_keys: QuantityAggregates | None = None
    vmf_exact: QuantityAggregates | None = None
    init: QuantityAggregates | None = None


NullModels._nested = {f.name: QuantityAggregates.from_dict for f in fields(NullModels)}
