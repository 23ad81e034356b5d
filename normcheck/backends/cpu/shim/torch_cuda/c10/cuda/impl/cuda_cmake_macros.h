// normcheck: the header only CUDA builds of PyTorch generate (c10/cuda/CUDAMacros.h includes it).
// A CPU build of torch, installed for its headers, lacks it; its one setting is that c10_cuda is
// a shared library.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
