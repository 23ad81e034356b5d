"""RMSNorm forward in the style of Liger-Kernel's ops/rms_norm.py (normcheck's own code).

One program per row, the whole row in one block; the statistic in fp32, rstd saved for the
backward; ``casting_mode`` picks where the upcast happens (0: everything in fp32, Gemma's way;
1: x̂ rounded to the input's type before the weight, Llama's way, Hugging Face's reference).

    y = w * x / sqrt(mean(x^2) + eps)        rstd = 1 / sqrt(mean(x^2) + eps)
"""

import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt

_CASTING_MODE_NONE: tl.constexpr = tl.constexpr(-1)
_CASTING_MODE_GEMMA: tl.constexpr = tl.constexpr(0)
_CASTING_MODE_LLAMA: tl.constexpr = tl.constexpr(1)


@triton.jit
def _rms_norm_forward_kernel(
    Y_ptr,            # y, [rows, n_cols]
    Y_row_stride,     # elements between two rows of y
    X_ptr,            # x, [rows, n_cols]
    X_row_stride,
    W_ptr,            # the weight, [n_cols]
    RSTD_ptr,         # rstd, [rows], fp32
    n_cols,
    eps,
    casting_mode: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,  # next power of two >= n_cols
):
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols

    X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0)
    X_row_dtype = X_row.dtype
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0)

    if casting_mode == _CASTING_MODE_LLAMA:
        X_row = X_row.to(tl.float32)
    if casting_mode == _CASTING_MODE_GEMMA:
        W_row = W_row.to(tl.float32)
        X_row = X_row.to(tl.float32)

    mean_square = tl.sum(X_row * X_row, axis=0) / n_cols
    rstd = rsqrt(mean_square + eps)
    tl.store(RSTD_ptr + row_idx, rstd)

    X_row = X_row * rstd
    if casting_mode == _CASTING_MODE_LLAMA:
        X_row = X_row.to(X_row_dtype)
    Y_row = X_row * W_row
    if casting_mode == _CASTING_MODE_GEMMA:
        Y_row = Y_row.to(X_row_dtype)
    tl.store(Y_ptr + row_idx * Y_row_stride + col_offsets, Y_row, mask=mask)
