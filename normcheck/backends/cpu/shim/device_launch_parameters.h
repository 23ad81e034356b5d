// normcheck cpu backend: the CUDA runtime API is host-side; kernels only need the shim.
#pragma once
#include "normcheck_simt.h"
