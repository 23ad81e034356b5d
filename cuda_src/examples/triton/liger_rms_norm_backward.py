"""RMSNorm backward dx in the style of Liger-Kernel's ``_rms_norm_backward_kernel`` (normcheck's
own code), in the default backward ABI of a Triton kernel, ``(DX, DY, X, W, MEAN, RSTD, rows,
cols, BLOCK_SIZE)`` (MEAN is None for RMSNorm; RSTD saved by the forward):

    x̂ = x·rstd;  c = Σ(x̂·w·dy)/D;  dx = rstd·(w·dy − x̂·c)

    normcheck check --backward cuda_src/examples/triton/liger_rms_norm_backward.py \\
        --entry _rms_norm_backward_dx --norm rmsnorm --dtype bf16

``_rms_norm_backward_dx_storage_dot`` plants a bug: the dot product c summed in the storage
type.
"""

import triton
import triton.language as tl


@triton.jit
def _rms_norm_backward_dx(DX, DY, X, W, MEAN, RSTD, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(RSTD + row)
    x_hat = x * rstd
    m = dy * w
    c = tl.sum(x_hat * m, axis=0) / cols
    dx = rstd * (m - x_hat * c)
    tl.store(DX + row * cols + offs, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_backward_dx_storage_dot(DX, DY, X, W, MEAN, RSTD, rows, cols,
                                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(RSTD + row)
    x_hat = x * rstd
    m = dy * w
    c = tl.sum((x_hat * m).to(X.dtype.element_ty), axis=0).to(tl.float32) / cols
    dx = rstd * (m - x_hat * c)
    tl.store(DX + row * cols + offs, dx.to(DX.dtype.element_ty), mask=mask)
