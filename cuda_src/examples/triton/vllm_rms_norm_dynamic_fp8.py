"""RMSNorm with dynamic per-token fp8 quantisation, written the way vLLM's fused kernel computes
it (csrc/quantization/fused_kernels/fused_layernorm_dynamic_per_token_quant.cu), in Triton
(normcheck's own code):

    y = round_T(round_T(x * rms) * w)           rms = 1 / sqrt(mean(x^2) + eps)
    s = max(max|y| / 448, 1 / (448 * 512))      one scale a row (token), written to SCALES
    q = e4m3(clamp(y / s, -448, 448))
"""

import triton
import triton.language as tl


@triton.jit
def rms_norm_dynamic_per_token_fp8(
    Q,        # [rows, n_cols] float8_e4m3fn codes
    SCALES,   # [rows] fp32
    X,        # [rows, n_cols] bf16/fp16
    W,        # [n_cols]
    eps,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(W + cols, mask=mask, other=0.0)
    y = (x * rms).to(X.dtype.element_ty) * w          # rounded twice, as vLLM's
    yf = y.to(tl.float32)
    amax = tl.max(tl.where(mask, tl.abs(yf), 0.0), axis=0)
    s = tl.maximum(amax / 448.0, 1.0 / (448.0 * 512.0))
    tl.store(SCALES + row, s)
    v = tl.minimum(tl.maximum(yf / s, -448.0), 448.0)
    tl.store(Q + row * n_cols + cols, v.to(tl.float8e4nv), mask=mask)
