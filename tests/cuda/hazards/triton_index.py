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


# Several rows per program (a launcher packing ROWS rows into one, as SGLang's tiled RMSNorm
# does): the element offset (first row + arange) * cols in int32, and its int64 twin.  Spec:
# triton_tiled.toml (grid = ceil(rows / ROWS), ROWS growing with the rows up to 16).
@triton.jit
def rms_tiled_int32(Y, X, W, eps, rows, cols, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    r0 = tl.program_id(0) * ROWS
    r = r0 + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BLOCK_SIZE)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(X + r * cols + c, mask=mask, other=0.0).to(tl.float32)  # int32: wraps
    w = tl.load(W + c, mask=c < cols, other=0.0).to(tl.float32)
    s = 1.0 / tl.sqrt(tl.sum(x * x, axis=1, keep_dims=True) / cols + eps)
    tl.store(Y + r * cols + c, (x * s * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_tiled_int64(Y, X, W, eps, rows, cols, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    r0 = tl.program_id(0).to(tl.int64) * ROWS
    r = r0 + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BLOCK_SIZE)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(X + r * cols + c, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + c, mask=c < cols, other=0.0).to(tl.float32)
    s = 1.0 / tl.sqrt(tl.sum(x * x, axis=1, keep_dims=True) / cols + eps)
    tl.store(Y + r * cols + c, (x * s * w).to(Y.dtype.element_ty), mask=mask)


# A persistent grid (a fixed number of programs, each looping over the rows it owns, as
# LMDeploy's RMSNorm does): the row's offset in int32, and its int64 twin.  Spec:
# triton_persistent.toml (grid = min(rows, 132)).
@triton.jit
def rms_persistent_int32(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), rows, tl.num_programs(0)):
        base = row * cols  # int32: wraps past 2^31 elements
        x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
        tl.store(Y + base + offs, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_persistent_int64(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), rows, tl.num_programs(0)):
        base = row.to(tl.int64) * cols
        x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
        tl.store(Y + base + offs, (x * r * w).to(Y.dtype.element_ty), mask=mask)
