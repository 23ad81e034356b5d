"""RMSNorm forward in the style of unsloth's kernels/rms_layernorm.py (normcheck's own code).

The row in fp32, ``tl.math.rsqrt``, x̂ rounded to the weight's type, then times the weight:
Hugging Face's Llama RMSNorm (``reference = "hf"``), whose x̂ rounding no exact reference
forgives.

    r = 1 / sqrt(mean(x^2) + eps);  y = w * round(x * r)
"""

import triton
import triton.language as tl


@triton.jit
def _rms_layernorm_forward(
    Y, Y_row_stride,
    X, X_row_stride,
    W, W_row_stride,
    r, r_row_stride,
    n_cols, eps,
    BLOCK_SIZE: tl.constexpr,
):
    row_idx = tl.program_id(0).to(tl.int64)  # as Unsloth's LONG_INDEXING does past 2^31 elements
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols

    Y += row_idx * Y_row_stride
    X += row_idx * X_row_stride
    r += row_idx * r_row_stride

    X_row = tl.load(X + col_offsets, mask=mask, other=0).to(tl.float32)
    W_row = tl.load(W + col_offsets, mask=mask, other=0)

    row_var = tl.sum(X_row * X_row, axis=0) / n_cols
    inv_var = tl.math.rsqrt(row_var + eps)
    tl.store(r, inv_var)
    normed = X_row * inv_var
    normed = normed.to(W_row.dtype)  # exact copy from HF
    output = normed * W_row
    tl.store(Y + col_offsets, output, mask=mask)
