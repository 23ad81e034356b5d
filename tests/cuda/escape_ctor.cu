// A kernel file whose static constructor forges a reply while normcheck loads it (before any
// launch), for tests/test_escape.py.
#include "escape.cu"

static const char* target() {
  const char* t = getenv("NORMCHECK_ESCAPE_TARGET");
  return t ? t : "/tmp/normcheck-escape-ctor";
}
__attribute__((constructor)) static void at_load() { forge(target()); }

extern "C" __global__ void innocent(float* y) { y[0] = 2; }
