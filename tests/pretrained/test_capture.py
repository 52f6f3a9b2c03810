"""capture_model against the models' own outputs: hidden states, LayerNorm without affine, attention, Q/K."""
from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")

from brownformer.pretrained.adapters import adapter_for  # noqa: E402
from brownformer.pretrained.hooked_forward import capture_model, head_counts, per_head_qk  # noqa: E402

from .tiny_models import KINDS, tiny_inputs, tiny_model  # noqa: E402

ATOL = 1e-5  # float32 forward passes of a 32-wide model


def _hidden_states(model, kind, x):
    key = "pixel_values" if kind == "vit" else "input_ids"
    with torch.no_grad():
        return model(**{key: x}, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("kind", KINDS)
def test_residual_stream_equals_hidden_states(kind):
    model, x = tiny_model(kind), tiny_inputs(kind)
    cap = capture_model(model, adapter_for(model.config.model_type), x)
    hs = _hidden_states(model, kind, x)
    L = cap.ln_hat.shape[0]
    # hidden_states[l] is block l's input; the last one coincides only for models without a final norm
    coincide = range(L + 1) if kind in ("bert", "vit") else range(L)
    for l in coincide:
        torch.testing.assert_close(torch.from_numpy(cap.resid[l]), hs[l], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox", "vit"])
def test_pre_affine_layernorm_is_layer_norm_without_weight_and_bias(kind):
    model, x = tiny_model(kind), tiny_inputs(kind)
    adapter = adapter_for(model.config.model_type)
    cap = capture_model(model, adapter, x)
    hs = _hidden_states(model, kind, x)
    for l, block in enumerate(adapter.blocks(model)):
        eps = adapter.norm_of(block).eps
        ref = F.layer_norm(hs[l], (hs[l].shape[-1],), eps=eps)  # pre-LN: the norm reads block l's input
        torch.testing.assert_close(torch.from_numpy(cap.ln_hat[l]), ref, atol=ATOL, rtol=0)


def test_bert_post_ln_affine_maps_pre_affine_to_the_module_output():
    model, x = tiny_model("bert"), tiny_inputs("bert")
    adapter = adapter_for("bert")
    with torch.no_grad():  # a non-trivial affine map, so gamma z + beta differs from z
        for block in adapter.blocks(model):
            norm = adapter.norm_of(block)
            norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)
    cap = capture_model(model, adapter, x)
    for l, block in enumerate(adapter.blocks(model)):
        norm = adapter.norm_of(block)
        z = torch.from_numpy(cap.ln_hat[l])
        torch.testing.assert_close(z * norm.weight + norm.bias, torch.from_numpy(cap.ln_out[l]), atol=ATOL, rtol=0)
        torch.testing.assert_close(z.sum(-1), torch.zeros(z.shape[:-1]), atol=ATOL, rtol=0)  # centred


def test_rmsnorm_pre_affine_is_x_over_rms_with_the_module_eps():
    model, x = tiny_model("llama"), tiny_inputs("llama")
    adapter = adapter_for("llama")
    cap = capture_model(model, adapter, x)
    hs = _hidden_states(model, "llama", x)
    for l, block in enumerate(adapter.blocks(model)):
        eps = adapter.norm_of(block).variance_epsilon
        ref = hs[l] / torch.sqrt(hs[l].pow(2).mean(-1, keepdim=True) + eps)
        torch.testing.assert_close(torch.from_numpy(cap.ln_hat[l]), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_rows_sum_to_one_and_decoders_are_causal(kind):
    model, x = tiny_model(kind), tiny_inputs(kind)
    adapter = adapter_for(model.config.model_type)
    A = torch.from_numpy(capture_model(model, adapter, x).attn)  # (L, H, B, n, n)
    torch.testing.assert_close(A.sum(-1), torch.ones(A.shape[:-1]), atol=ATOL, rtol=0)
    upper = torch.triu(torch.ones(A.shape[-2:], dtype=torch.bool), diagonal=1)
    assert adapter.causal == (kind in ("gpt2", "gpt_neox", "llama"))
    if adapter.causal:
        assert float(A[..., upper].abs().max()) == 0.0
    else:
        assert float(A[..., upper].min()) > 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_extracted_per_head_q_and_k_equal_the_hooked_ones(kind, monkeypatch):
    """The query/key the model hands its eager attention function (hooked by wrapping that function) equal
    the adapter's per-head weights applied to the attention input: catches fused and interleaved layouts."""
    model, x = tiny_model(kind), tiny_inputs(kind)
    adapter = adapter_for(model.config.model_type)
    blocks = adapter.blocks(model)
    modeling = sys.modules[type(adapter.attention_of(blocks[0])).__module__]
    hooked, inputs = [], []
    original = modeling.eager_attention_forward

    def recording(module, query, key, *args, **kwargs):
        hooked.append((query.detach(), key.detach()))
        return original(module, query, key, *args, **kwargs)

    monkeypatch.setattr(modeling, "eager_attention_forward", recording)
    handles = [adapter.attention_of(b).register_forward_pre_hook(
        lambda m, a, kw: inputs.append((a[0] if a else kw["hidden_states"], kw.get("position_embeddings"))),
        with_kwargs=True) for b in blocks]
    with torch.no_grad():
        model(**{"pixel_values" if kind == "vit" else "input_ids": x})
    for h in handles:
        h.remove()
    H, H_kv = head_counts(model.config)
    rotary = getattr(modeling, "apply_rotary_pos_emb", None) if adapter.rotary else None
    assert len(hooked) == len(blocks)
    for block, (q_ref, k_ref), (inp, pos) in zip(blocks, hooked, inputs):
        q, k = per_head_qk(adapter.head_weights(block, H, H_kv), inp, rotary_fn=rotary, position_embeddings=pos)
        assert q.shape == q_ref.shape and k.shape == k_ref.shape  # (B, H, n, d_h), (B, H_kv, n, d_h)
        torch.testing.assert_close(q, q_ref, atol=ATOL, rtol=0)
        torch.testing.assert_close(k, k_ref, atol=ATOL, rtol=0)


def test_a_wrong_weight_layout_is_refused():
    """Reading GPT-NeoX's interleaved [q | k | v] rows as three blocks (GPT-2's layout) must not pass."""
    model, x = tiny_model("gpt_neox"), tiny_inputs("gpt_neox")
    right = adapter_for("gpt_neox")

    def blocks_layout(attn, H, H_kv):
        W = attn.query_key_value.weight  # (3d, d) read as [Q; K; V] blocks: wrong for NeoX
        d = W.shape[1]
        b = attn.query_key_value.bias
        from brownformer.pretrained.adapters import HeadWeights
        return HeadWeights(q=W[:d].reshape(H, -1, d), k=W[d:2 * d].reshape(H, -1, d), v=W[2 * d:].reshape(H, -1, d),
                           o=attn.dense.weight, q_bias=b[:d].reshape(H, -1), k_bias=b[d:2 * d].reshape(H, -1))

    wrong = dataclasses.replace(right, weights=blocks_layout)
    assert capture_model(model, right, x).qk_max_deviation < 1e-5
    with pytest.raises(ValueError, match="wrong weight layout"):
        capture_model(model, wrong, x)


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama", "vit"])
def test_sublayer_stream_holds_the_block_inputs_and_its_norms_read_it(kind):
    """Depth at sub-layer resolution: every second state is a block input (the hidden states the model returns), and
    each norm's pre-affine output is the norm of the state it reads (pre-LN: the state before the sub-layer)."""
    model, x = tiny_model(kind), tiny_inputs(kind)
    adapter = adapter_for(model.config.model_type)
    cap = capture_model(model, adapter, x)
    L = cap.ln_hat.shape[0]
    assert cap.sub_hat.shape[0] == 2 * L and cap.sub_resid.shape[0] == 2 * L + 1
    hs = _hidden_states(model, kind, x)
    for l in range(L):
        torch.testing.assert_close(torch.from_numpy(cap.sub_resid[2 * l]), hs[l], atol=ATOL, rtol=0)
    if adapter.placement == "pre" and adapter.norm_kind == "layernorm":
        for j in range(2 * L):
            state = torch.from_numpy(cap.sub_resid[j])
            ref = F.layer_norm(state, (state.shape[-1],), eps=adapter.norm_of(adapter.blocks(model)[0]).eps)
            torch.testing.assert_close(torch.from_numpy(cap.sub_hat[j]), ref, atol=ATOL, rtol=0)
    if adapter.placement == "post":  # post-LN: the stream after a sub-layer is that norm's output
        torch.testing.assert_close(torch.from_numpy(cap.sub_resid[1:]), torch.from_numpy(cap.sub_out), atol=ATOL,
                                   rtol=0)


def test_parallel_residual_has_no_sublayer_stream():
    model, x = tiny_model("gpt_neox"), tiny_inputs("gpt_neox")
    cap = capture_model(model, adapter_for("gpt_neox"), x)
    assert cap.sub_hat is None and cap.sub_resid is None
