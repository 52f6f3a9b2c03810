"""Probe inputs: text windows through the checkpoint's own tokenizer files, ids, images; bad inputs refused."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers", reason="needs the pretrained extra: pip install 'brownformer[pretrained]'")

from tokenizers import Regex, Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from brownformer.pretrained.inputs import InputSpec, build_inputs  # noqa: E402

from .tiny_models import VOCAB, tiny_config  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog; " * 4


def _char_tokenizer(model_dir):
    """A character-level tokenizer saved as tokenizer files, and its vocabulary (an independent encoder)."""
    vocab = {c: i for i, c in enumerate(sorted(set(TEXT)))}
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(model_dir)
    return vocab


def test_text_windows_use_the_checkpoints_tokenizer(tmp_path):
    vocab = _char_tokenizer(tmp_path)
    (tmp_path / "t.txt").write_text(TEXT)
    ids = build_inputs(tmp_path, tiny_config("gpt2"), "text", InputSpec(text=tmp_path / "t.txt", n_inputs=3, n_tokens=7))
    encoded = np.array([vocab[c] for c in TEXT])
    starts = np.linspace(0, len(TEXT) - 7, 3).astype(int)  # evenly spaced windows
    np.testing.assert_array_equal(ids.numpy(), np.stack([encoded[s:s + 7] for s in starts]))


def test_text_without_tokenizer_files_or_with_too_few_tokens_is_refused(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(ValueError, match="no tokenizer files.*--input-ids"):
        build_inputs(tmp_path, tiny_config("gpt2"), "text", InputSpec(text=tmp_path / "t.txt"))
    _char_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="fewer than n_inputs x n_tokens"):
        build_inputs(tmp_path, tiny_config("gpt2"), "text", InputSpec(text=tmp_path / "t.txt", n_inputs=8, n_tokens=64))


def test_ids_outside_the_vocabulary_or_beyond_the_context_are_refused(tmp_path):
    np.save(tmp_path / "ids.npy", np.full((2, 4), VOCAB))
    with pytest.raises(ValueError, match="vocab_size"):
        build_inputs(tmp_path, tiny_config("gpt2"), "text", InputSpec(input_ids=tmp_path / "ids.npy"))
    np.save(tmp_path / "long.npy", np.zeros((2, 65), int))
    with pytest.raises(ValueError, match="context of 64"):
        build_inputs(tmp_path, tiny_config("gpt2"), "text", InputSpec(input_ids=tmp_path / "long.npy"))


def test_digits_are_resized_to_the_models_images_and_wrong_images_refused(tmp_path):
    x = build_inputs(tmp_path, tiny_config("vit"), "image", InputSpec(dataset="digits", n_inputs=5)).numpy()
    assert x.shape == (5, 1, 16, 16) and x.min() >= -1 and x.max() <= 1
    np.save(tmp_path / "img.npy", np.zeros((2, 3, 16, 16), np.float32))
    with pytest.raises(ValueError, match=r"must be \(n, 1, 16, 16\)"):
        build_inputs(tmp_path, tiny_config("vit"), "image", InputSpec(images=tmp_path / "img.npy"))
    with pytest.raises(ValueError, match="image model"):
        build_inputs(tmp_path, tiny_config("vit"), "image", InputSpec(text=tmp_path / "t.txt"))
