"""The spec shapes of the field's Triton norms (normcheck's own code, in the style of
Liger-Kernel's ops/rms_norm.py): row strides passed as plain integers (``X_row_stride``), a
block size and a casting mode as ``tl.constexpr``.

    y = w * x / sqrt(mean(x^2) + eps)        rstd = 1 / sqrt(mean(x^2) + eps)
"""

import triton
import triton.language as tl


@triton.jit
def rms_norm_fwd(
    Y,                # y, [rows, n_cols], contiguous
    Y_row_stride,     # elements between two rows of y
    X,                # x, [rows, X_row_stride]
    X_row_stride,     # elements between two rows of x (a padded pitch, as a plain integer)
    W,                # the weight, [n_cols]
    RSTD,             # rstd, [rows], fp32
    n_cols,
    eps,
    UPCAST: tl.constexpr,      # 1: x and w in fp32, y rounded once
    BLOCK_SIZE: tl.constexpr,  # next power of two >= n_cols
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X + row * X_row_stride + cols, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=mask, other=0.0)
    if UPCAST:
        x = x.to(tl.float32)
        w = w.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(RSTD + row, rstd)
    tl.store(Y + row * Y_row_stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
