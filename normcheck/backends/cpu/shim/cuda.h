// normcheck cpu backend: the SIMT shim, then the CUDA driver API's declarations (host-side;
// a kernel's host code may name them, normcheck never calls them).
#pragma once
#include "normcheck_simt.h"
#include_next <cuda.h>
