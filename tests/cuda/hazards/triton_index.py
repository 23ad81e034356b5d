"""Triton RMSNorms for tests/test_hazards.py: the row's offset in int32 (program_id(0) * the row
stride: the commonest large-tensor bug of Triton norms, shipped and fixed in a public project)
and its twin in int64.  Default ABI: (Y, X, W, eps, rows, cols, BLOCK_SIZE)."""
import triton
import triton.language as tl


@triton.jit
def rms_int32_offset(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    base = row * cols  # int32: wraps past 2^31 elements
    x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    tl.store(Y + base + offs, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_int64_offset(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    base = row * cols
    x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    tl.store(Y + base + offs, (x * r * w).to(Y.dtype.element_ty), mask=mask)
