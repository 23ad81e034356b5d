// Kernels that try to do what a kernel under test must not, for tests/test_hostile.py.  Each
// writes y[0] = 1 if its attempt came back without the sandbox stopping it.
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/socket.h>

extern "C" __global__ void write_file(float* y, const char* path) {
  FILE* f = fopen(path, "w");
  if (f) { fputs("written by a kernel\n", f); fclose(f); y[0] = 1; }
}
extern "C" __global__ void read_passwd(float* y) {
  FILE* f = fopen("/etc/passwd", "r");
  if (f) { char b[64]; if (fgets(b, sizeof b, f)) y[0] = 1; fclose(f); }
}
extern "C" __global__ void read_cloexec(float* y) {
  // O_CLOEXEC slips past seccomp's rule; landlock still refuses the read
  int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) { char b[8]; if (read(fd, b, 8) > 0) y[0] = 1; close(fd); }
}
extern "C" __global__ void run_command(float* y, const char* path) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "touch %s", path);
  if (system(cmd) == 0) y[0] = 1;
}
extern "C" __global__ void fork_bomb(float* y) {
  for (int i = 0; i < 4; ++i) if (fork() == 0) { for (;;) {} }
  y[0] = 1;
}
extern "C" __global__ void fork_abort(float* y) {
  if (fork() == 0) abort();
  y[0] = 1;
}
extern "C" __global__ void network(float* y) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0) y[0] = 1;
}
extern "C" __global__ void remove_file(float* y, const char* path) {
  if (unlink(path) == 0) y[0] = 1;
}
// faults that must keep their names
__device__ int deep(int n) {
  volatile char pad[4096];
  pad[0] = (char)n;
  return n <= 0 ? pad[0] : deep(n - 1) + pad[0];
}
extern "C" __global__ void stack_overflow(float* y) { y[0] = (float)deep(1 << 20); }
extern "C" __global__ void read_before_start(float* y, const float* x, int n) {
  if (threadIdx.x == 0) y[0] = x[-1];
}
extern "C" __global__ void read_past_end(float* y, const float* x, int n) {
  if (threadIdx.x == 0) y[0] = x[n];
}
extern "C" __global__ void spin(float* y) {
  volatile int k = 0;
  while (k == 0) {}
}
// a 16-byte vector load from the start of an array of 6 floats (24 bytes): a GPU allocation is
// 256-byte aligned, so this is a sound kernel the tight layout must not blame
// (inline PTX, whose v4 load checks the alignment as a GPU does)
extern "C" __global__ void vector_load(float* y, const float* x, int n) {
  if (threadIdx.x == 0) {
    float a, b, c, d;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(x));
    y[0] = a + b + c + d + x[n - 1];
  }
}
