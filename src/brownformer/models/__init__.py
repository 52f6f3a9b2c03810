"""Transformer variants: a ViT and a causal char-LM sharing one block with LN placement pre/post/none."""
from brownformer.models.transformer import (Attention, Block, CharTransformer, VisionTransformer,
                                            build_model, loss_fn)

__all__ = ["Attention", "Block", "CharTransformer", "VisionTransformer", "build_model", "loss_fn"]
