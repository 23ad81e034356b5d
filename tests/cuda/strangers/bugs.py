"""Triton norms with a bug whose cause is in the error's shape (#47), in Liger's style."""

import triton
import triton.language as tl


@triton.jit
def rms_block_divisor(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """RMSNorm dividing the sum of squares by BLOCK_SIZE, not the row's width."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / BLOCK_SIZE + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def ln_padding_in_variance(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """LayerNorm whose variance takes (x - mean)² over the whole block: the padding lanes
    (loaded as 0) add (0 - mean)² each."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = x - mean
    var = tl.sum(d * d, axis=0) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
