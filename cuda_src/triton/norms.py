"""normcheck's built-in Triton norms: the yardstick of a Triton kernel's warn, and the Triton
rows of the report beside the CUDA ones.

    LayerNorm: mean = Σx/D, var = Σ(x-mean)²/D, y = (x-mean)·rstd·γ + β, rstd = 1/√(var+ε)
    RMSNorm:   y = x·rstd·γ, rstd = 1/√(Σx²/D + ε)

Arguments (the default Triton ABI, docs/DESIGN.md): Y [rows, cols] output; X [rows, cols]
input; W [cols] (γ); B [cols] (β, LayerNorm only); eps the fp32 ε; rows, cols the shape;
ORDER (constexpr) the precision order -- 0 upcast_square (convert, then square and
accumulate in fp32), 1 square_upcast (square in storage, then convert), 2
storage_accumulate (every partial sum rounded to storage); BLOCK_SIZE (constexpr) the columns
a step, min(4096, next_pow2(cols)): a row wider than a block is walked in steps.  Grid: one
program per row.  The storage is the pointers' element type.

INDEX (the variants; tests/test_kernels.py keeps this list equal to the entries below)
  triton_layernorm_naive       one pass, E[x²] - E[x]² (unclamped): cancels on offset rows
  triton_layernorm_two_pass    the mean, then Σ(x-mean)², then the output: three walks
  triton_layernorm_welford     per block mean and M2 (two-pass inside it), Chan's merge across
  triton_rmsnorm_rms           Σx² in one walk, then the output
"""

import triton
import triton.language as tl


@triton.jit
def _square(x, ORDER: tl.constexpr):
    """x² as the order says, in fp32 (order 2 keeps it in storage for the sum)."""
    if ORDER == 0:
        xf = x.to(tl.float32)
        return xf * xf
    elif ORDER == 1:
        return (x * x).to(tl.float32)
    else:
        return x * x


@triton.jit
def _value(x, ORDER: tl.constexpr):
    """x as summed for the mean: storage under order 2, else fp32."""
    if ORDER == 2:
        return x
    else:
        return x.to(tl.float32)


@triton.jit
def _add(acc, part, ORDER: tl.constexpr):
    """The running sum: rounded to storage under order 2."""
    if ORDER == 2:
        return (acc + part.to(tl.float32)).to(part.dtype).to(tl.float32)
    else:
        return acc + part


@triton.jit
def triton_layernorm_naive(Y, X, W, B, eps, rows, cols, ORDER: tl.constexpr,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = 0.0
    ss = 0.0
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + row * cols + offs, mask=offs < cols, other=0.0)
        s = _add(s, tl.sum(_value(x, ORDER), axis=0), ORDER)
        ss = _add(ss, tl.sum(_square(x, ORDER), axis=0), ORDER)
    mean = s / cols
    rstd = 1.0 / tl.sqrt(ss / cols - mean * mean + eps)
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
        b = tl.load(B + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * cols + offs, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty),
                 mask=m)


@triton.jit
def triton_layernorm_two_pass(Y, X, W, B, eps, rows, cols, ORDER: tl.constexpr,
                              BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = 0.0
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + row * cols + offs, mask=offs < cols, other=0.0)
        s = _add(s, tl.sum(_value(x, ORDER), axis=0), ORDER)
    mean = s / cols
    ss = 0.0
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + row * cols + offs, mask=offs < cols, other=0.0)
        d = tl.where(offs < cols, x.to(tl.float32) - mean, 0.0)
        ss = _add(ss, tl.sum(_square(d.to(x.dtype) if ORDER != 0 else d, ORDER), axis=0),
                  ORDER)
    rstd = 1.0 / tl.sqrt(ss / cols + eps)
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
        b = tl.load(B + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * cols + offs, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty),
                 mask=m)


@triton.jit
def triton_layernorm_welford(Y, X, W, B, eps, rows, cols, ORDER: tl.constexpr,
                             BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    n = 0.0
    mean = 0.0
    m2 = 0.0
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0)
        nb = tl.minimum(cols - c0, BLOCK_SIZE).to(tl.float32)
        mb = tl.sum(_value(x, ORDER), axis=0).to(tl.float32) / nb
        d = tl.where(m, x.to(tl.float32) - mb, 0.0)
        m2b = tl.sum(_square(d.to(x.dtype) if ORDER != 0 else d, ORDER), axis=0).to(tl.float32)
        tot = n + nb
        delta = mb - mean
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta * delta * (n * nb / tot)
        n = tot
    rstd = 1.0 / tl.sqrt(m2 / cols + eps)
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
        b = tl.load(B + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * cols + offs, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty),
                 mask=m)


@triton.jit
def triton_rmsnorm_rms(Y, X, W, eps, rows, cols, ORDER: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ss = 0.0
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + row * cols + offs, mask=offs < cols, other=0.0)
        ss = _add(ss, tl.sum(_square(x, ORDER), axis=0), ORDER)
    rstd = 1.0 / tl.sqrt(ss / cols + eps)
    for c0 in range(0, cols, BLOCK_SIZE):
        offs = c0 + tl.arange(0, BLOCK_SIZE)
        m = offs < cols
        x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * cols + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=m)
