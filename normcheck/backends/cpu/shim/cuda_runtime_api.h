// normcheck cpu backend: the SIMT shim, which includes the CUDA runtime API's declarations
// (host-side: a kernel's host code may name them; normcheck never calls them).
#pragma once
#include "normcheck_simt.h"
