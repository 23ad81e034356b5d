// A kernel file whose static constructor makes a forbidden call while normcheck loads it (before
// any launch), for tests/test_escape.py: a fail of kind sandbox, not "cannot judge".
#include <unistd.h>
__attribute__((constructor)) static void at_load() { setsid(); }
extern "C" __global__ void k(float* y, const float* x, const float* g, float eps, int rows,
                             int cols) {
  if (blockIdx.x >= rows) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[blockIdx.x * cols + c] = x[blockIdx.x * cols + c];
}
