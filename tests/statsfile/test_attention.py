"""The attention file's blocks (brownformer.statsfile.attention): the record the statistics build is the record its
JSON parses back to, with and without a causal mask, and a quantity's name is checked."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from brownformer.io import to_jsonable
from brownformer.stats.markov.markov_chain import (UNDEFINED_CAUSAL, analyze_attention, attention_null_models,
                                                   head_subspace_vmf, weight_isotropy)
from brownformer.statsfile import QUANTITY_NAMES, AttentionStats, ByQuantity, HeadKernels, parse_stats_file

L, H, B, N, D = 1, 2, 3, 6, 4


def _softmax(S):
    E = np.exp(S - S.max(-1, keepdims=True))
    return E / E.sum(-1, keepdims=True)


def _capture(causal: bool) -> AttentionStats:
    """Every block of an attention file: statistics, nulls, head kernels with their subspace fit, head average."""
    rng = np.random.default_rng(0)
    U = rng.standard_normal((L, B, N, D))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    W = rng.standard_normal((D, D))
    S = np.broadcast_to(3.0 * np.einsum("lbid,de,lbje->lbij", U, W, U)[:, None], (L, H, B, N, N))
    A = _softmax(np.where(np.tril(np.ones((N, N))) > 0, S, -np.inf) if causal else S)
    out = analyze_attention(A, features=U, head_axis=1, rng=0)
    kernels = HeadKernels(per_layer=[weight_isotropy(W, W, H)], source="test")
    kernels = dataclasses.replace(kernels, subspace_vmf=head_subspace_vmf(A, U, kernels, causal=causal))
    return dataclasses.replace(out, null_models=attention_null_models(A, features=U, rng=1), head_kernels=kernels,
                               step=10)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_the_record_built_is_the_record_its_json_parses_to(causal):
    rec = _capture(causal)
    text = json.dumps(to_jsonable(rec))
    back = parse_stats_file(json.loads(text), "attention")
    assert back == rec
    assert json.dumps(to_jsonable(back)) == text  # and the same JSON again, key order included


def test_the_causal_blocks_say_which_quantities_are_undefined():
    rec = _capture(True)
    assert sorted(k for k, _ in rec.undefined.items()) == sorted(UNDEFINED_CAUSAL)
    assert rec.null_models.row_shuffled is None and rec.null_models.shuffled_keys is not None
    assert rec.per_matrix.mean_absorption_time is not None and rec.per_matrix.stationary_entropy_normalized is None
    assert all(v is None for v in rec.per_matrix.reversibility_residual)
    assert rec.aggregate.reversibility_residual.n == 0 and rec.aggregate.reversibility_residual.mean is None
    assert not list(_capture(False).undefined.items())  # written as {}


def test_quantity_names_are_checked():
    values = ByQuantity(spectral_gap=[0.5])
    assert values.get("spectral_gap") == [0.5] and values.get("dobrushin", []) == []
    with pytest.raises(ValueError, match="not an attention quantity"):
        values.get("spectral_gaps")
    with pytest.raises(ValueError, match="unknown keys"):
        ByQuantity.from_dict({"spectral_gaps": [0.5]}, "per_matrix")
    assert QUANTITY_NAMES[0] == "spectral_gap" and len(set(QUANTITY_NAMES)) == len(QUANTITY_NAMES)
