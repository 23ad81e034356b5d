"""Triton norms with one planted bug each (normcheck's own code), in the default Triton ABI:
RMSNorm ``(Y, X, W, eps, rows, cols, BLOCK_SIZE)``, LayerNorm ``(Y, X, W, B, eps, rows, cols,
BLOCK_SIZE)``, one program per row, BLOCK_SIZE = next_pow2(cols):

    normcheck check cuda_src/examples/triton/planted_bugs.py --entry rms_bf16_accumulate \\
        --norm rmsnorm --dtype bf16

Each fails with its cause; ``rms_sound`` and ``ln_sound`` are the same kernels without the bug.
"""

import triton
import triton.language as tl


@triton.jit
def rms_sound(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """fp32 statistics, one rounding at the store."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_bf16_accumulate(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """The bug: the squares summed in the storage type (no .to(tl.float32) before the sum)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0)
    ss = tl.sum(x * x, axis=0)
    rstd = 1.0 / tl.sqrt(ss.to(tl.float32) / cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x.to(tl.float32) * rstd * w).to(Y.dtype.element_ty),
             mask=mask)


@triton.jit
def rms_missing_mask(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """The bug: the store has no mask -- past the row's end when cols is not a power of two."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x * rstd * w).to(Y.dtype.element_ty))


@triton.jit
def rms_truncating_store(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """The bug: the output rounded toward zero (fp_downcast_rounding="rtz")."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd * w).to(Y.dtype.element_ty, fp_downcast_rounding="rtz")
    tl.store(Y + row * cols + offs, y, mask=mask)


@triton.jit
def ln_sound(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """Two-pass statistics in fp32."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=mask).to(tl.float32)
    b = tl.load(B + offs, mask=mask).to(tl.float32)
    tl.store(Y + row * cols + offs, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def ln_one_pass(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """The bug: var = E[x^2] - E[x]^2 (one pass), which cancels on rows far from zero."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    var = tl.sum(x * x, axis=0) / cols - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask).to(tl.float32)
    b = tl.load(B + offs, mask=mask).to(tl.float32)
    tl.store(Y + row * cols + offs, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty),
             mask=mask)


@triton.jit
def ln_bessel(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """The bug: the variance divided by cols - 1 (the sample variance, not the population's)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / (cols - 1) + eps)
    w = tl.load(W + offs, mask=mask).to(tl.float32)
    b = tl.load(B + offs, mask=mask).to(tl.float32)
    tl.store(Y + row * cols + offs, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
