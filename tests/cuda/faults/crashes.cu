// Kernels that stop the process, each at a line marked // FAULT: name: the fault names that
// line, also where the faulting instruction is in a library (abort() inside assert).
#include <cassert>

extern "C" __global__ void failed_assert(float* y, const float* x, int cols) {
  assert(cols < 0);  // FAULT: failed_assert
}

extern "C" __global__ void divides_by_zero(float* y, const float* x, int cols) {
  volatile int zero = 0;
  y[threadIdx.x] = (float)(cols / zero);  // FAULT: divides_by_zero
}

extern "C" __global__ void traps(float* y, const float* x, int cols) {
  if (threadIdx.x == 3) __trap();  // FAULT: traps
}
