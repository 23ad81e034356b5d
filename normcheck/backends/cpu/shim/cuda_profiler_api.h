// normcheck cpu backend: CUDA's profiler control (cuda_profiler_api.h, which the CUDA toolkit
// ships and the nvidia-cuda-runtime wheel does not): a kernel file including it for
// cudaProfilerStart/Stop (llm.c's llmc/, DeepSpeed) builds; nothing is profiled, both succeed.
#pragma once
#include "normcheck_simt.h"

static inline cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
static inline cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
