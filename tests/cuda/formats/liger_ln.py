"""A LayerNorm forward in the style of Liger-Kernel's ops/layer_norm.py (normcheck's own code):
the statistics written as the rows' type -- Mean and RSTD allocated with X.dtype (bf16)."""

import triton
import triton.language as tl


@triton.jit
def _layer_norm_forward_kernel(
    Y_ptr, Y_row_stride,
    X_ptr, X_row_stride,
    W_ptr, W_row_stride,
    B_ptr, B_row_stride,
    Mean_ptr, Mean_row_stride,
    RSTD_ptr, RSTD_row_stride,
    n_cols, eps,
    BLOCK_SIZE: tl.constexpr,
):
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0)
    B_row = tl.load(B_ptr + col_offsets, mask=mask, other=0)
    X_f32 = X_row.to(tl.float32)
    mean = tl.sum(X_f32, axis=0) / n_cols
    X_centered = X_f32 - mean
    X_centered_masked = tl.where(mask, X_centered, 0.0)
    var = tl.sum(X_centered_masked * X_centered_masked, axis=0) / n_cols
    rstd = tl.rsqrt(var + eps)
    tl.store(Mean_ptr + row_idx * Mean_row_stride, mean)
    tl.store(RSTD_ptr + row_idx * RSTD_row_stride, rstd)
    Y_f32 = X_centered * rstd * W_row.to(tl.float32) + B_row.to(tl.float32)
    tl.store(Y_ptr + row_idx * Y_row_stride + col_offsets, Y_f32.to(X_row.dtype), mask=mask)
