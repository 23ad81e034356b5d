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


@triton.jit
def ln_bf16_no_upcast(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """LayerNorm that never converts its bf16 loads (a public bug, fixed by ``.to(tl.float32)``):
    tl.sum(x) adds in bf16; the division by the int width is fp32 in Triton, and from there on
    the kernel is in float -- only the mean's sum is in the storage format."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / cols
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0)
    b = tl.load(B + offs, mask=mask, other=0.0)
    tl.store(Y + row * cols + offs, d * rstd * w + b, mask=mask)


@triton.jit
def ln_looped_padding_in_variance(Y, X, W, B, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    """A looped LayerNorm (Triton's tutorial's shape: chunks of BLOCK_SIZE) whose variance loop
    squares x - mean over whole chunks: the last chunk's masked lanes add (0 - mean)² each."""
    row = tl.program_id(0).to(tl.int64)
    CHUNK: tl.constexpr = 256
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for off in range(0, cols, CHUNK):
        offs = off + tl.arange(0, CHUNK)
        acc += tl.load(X + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / cols
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for off in range(0, cols, CHUNK):
        offs = off + tl.arange(0, CHUNK)
        x = tl.load(X + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
        acc += (x - mean) * (x - mean)
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
    for off in range(0, cols, CHUNK):
        offs = off + tl.arange(0, CHUNK)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
        b = tl.load(B + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * cols + offs, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty),
                 mask=m)
