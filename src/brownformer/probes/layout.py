"""The trajectory layout as text, for `brownformer extract --help`."""
from __future__ import annotations

__all__ = ["describe_layout", "MATRICES"]

#: the attention weight matrices of a layer, in the order of the capture store and of weights/l<l>_<m>.npy (here,
#: torch-free, so that the extraction runs without importing torch)
MATRICES = ("q", "k", "v", "o")

_LAYOUT = """\
Reads RUN_DIR/probes/ (index.parquet, meta.json, one c<k>.npz per capture point k) and writes
OUT/ (replaced as a whole; built beside it, then swapped in):

  depth/ln_c<k>.npy            (L, N, d)     sphere, time layer: LN1 output before the affine / sqrt(d)
  depth/lnaff_c<k>.npy         (L, N, d)     euclidean, time layer: LN1 output after the affine (gamma, beta),
                                             raw (not divided by sqrt(d))
  depth/resid_c<k>.npy         (L+1, N, d)   euclidean, time layer: residual stream entering each block,
                                             last time = output of the last block
  training/ln_l<l>.npy         (C, N, d)     sphere, time lr_sq_sum: layer l's normalised LN output across
                                             captures (sidecar "clocks": step, lr_sum, lr_sq_sum)
  weights/l<l>_<q|k|v|o>.npy   (C, R, c)     euclidean, time lr_sq_sum: rows of W_Q/W_K/W_V/W_O (or Gaussian
                                             row projections above probes.max_weight_size)
  gradnoise/l<l>_<q|k|v|o>.npy (Cn, M, p)    euclidean, time step: M minibatch gradients minus the
                                             large-batch gradient, flattened, at the noise captures
  attention/c<k>.npy           (L, H, B, n, n) attention probabilities (rows sum to 1; causal for the LM)
  attention/c<k>_features.npy  (L, B, n, d)  unit-norm token features the attention acts on
  index.json                   {"run", "files": [{"path", "category", "kind", "time", "layer", "tensor", "capture"}]}
  summary.json                 counts, captures used, store size (MB), capture seconds and overhead

N = probe inputs x tokens (walker i*n + t is token t of input i; token 0 is the ViT's CLS token);
C = number of captures, Cn = captures with gradient noise (every probes.noise_every-th).
depth/ and attention/ files are written for the first, the last and ~6 evenly spaced captures.
Every .npy has a sidecar <name>.sidecar.json: {"kind", "time", "times", "walkers", "source": {"run",
"layer", "head", "tensor", "captures", "steps"}, ...}; values are float32.
"""


def describe_layout() -> str:
    """What `brownformer extract` writes, one line per file family (for the CLI's --help)."""
    return _LAYOUT
