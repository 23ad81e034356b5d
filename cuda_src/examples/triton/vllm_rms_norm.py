"""RMSNorm forward in the style of vLLM's Triton norms (its batch-invariant ops; normcheck's own
code): rows of any width, walked in blocks of BLOCK_SIZE twice -- the sum of squares in fp32,
then the output -- so a row never has to fit in one block.

    y = x / sqrt(sum(x^2) / n_cols + eps) * w
"""

import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    input_ptr,
    weight_ptr,
    output_ptr,
    input_row_stride,
    output_row_stride,
    n_cols,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    row_idx = tl.program_id(0).to(tl.int64)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    output_row_start_ptr = output_ptr + row_idx * output_row_stride

    sum_sq = tl.zeros([1], dtype=tl.float32)
    for col_offset in range(0, n_cols, BLOCK_SIZE):
        col_idx = col_offset + tl.arange(0, BLOCK_SIZE)
        mask = col_idx < n_cols
        vals = tl.load(row_start_ptr + col_idx, mask=mask, other=0.0).to(tl.float32)
        sum_sq += tl.sum(vals * vals, axis=0)

    mean_sq = sum_sq / n_cols
    rrms = 1.0 / tl.sqrt(mean_sq + eps)

    for col_offset in range(0, n_cols, BLOCK_SIZE):
        col_idx = col_offset + tl.arange(0, BLOCK_SIZE)
        mask = col_idx < n_cols
        vals = tl.load(row_start_ptr + col_idx, mask=mask, other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + col_idx, mask=mask, other=1.0).to(tl.float32)
        output = vals * rrms * weight
        tl.store(output_row_start_ptr + col_idx, output.to(output_ptr.dtype.element_ty),
                 mask=mask)
