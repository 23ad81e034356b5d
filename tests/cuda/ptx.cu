// Inline PTX on the cpu backend, for tests/test_cub_ptx.py: each kernel exercises a group of
// the instructions normcheck.backends.cpu.ptx translates and writes what it got.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

// out[t*8 + k]: rsqrt, rcp, sqrt (approx and rn), ex2, lg2, fma, ftz of a subnormal
extern "C" __global__ void ptx_math(float* out, const float* x) {
  int t = threadIdx.x;
  float v = x[t], r[8];
  asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r[0]) : "f"(v));
  asm volatile("rcp.approx.f32 %0, %1;" : "=f"(r[1]) : "f"(v));
  asm("sqrt.approx.f32 %0, %1;" : "=f"(r[2]) : "f"(v));
  asm("sqrt.rn.f32 %0, %1;" : "=f"(r[3]) : "f"(v));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r[4]) : "f"(v));
  asm("lg2.approx.f32 %0, %1;" : "=f"(r[5]) : "f"(v));
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r[6]) : "f"(v), "f"(v), "f"(1.0f));
  float sub = 1e-40f, z;
  asm("add.ftz.f32 %0, %1, 0f00000000;" : "=f"(z) : "f"(sub));
  r[7] = z;
  for (int k = 0; k < 8; ++k) out[t * 8 + k] = r[k];
}

// shuffles: bfly, down (with the predicate), up, idx with a 16-lane segment, and %laneid
extern "C" __global__ void ptx_shfl(int* out) {
  int lane = threadIdx.x;
  int v = 100 + lane, a, b, c, d, l;
  unsigned p;
  asm volatile("shfl.sync.bfly.b32 %0, %1, 4, 0x1f, 0xffffffff;" : "=r"(a) : "r"(v));
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 r0;\n\t"
      "shfl.sync.down.b32 r0|p, %2, 5, 0x1f, 0xffffffff;\n\t"
      "mov.b32 %0, r0;\n\tselp.u32 %1, 1, 0, p;\n\t}"
      : "=r"(b), "=r"(p)
      : "r"(v));
  asm volatile("shfl.sync.up.b32 %0, %1, 2, 0x0, 0xffffffff;" : "=r"(c) : "r"(v));
  asm volatile("shfl.sync.idx.b32 %0, %1, 3, 0x101f, 0xffffffff;" : "=r"(d) : "r"(v));  // width 16
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  int* o = out + lane * 6;
  o[0] = a; o[1] = b; o[2] = (int)p; o[3] = c; o[4] = d; o[5] = l;
}

// conversions: cvt.rn.f16.f32, cvt.rn.bf16x2.f32 (a to the upper half), cvt.f32.f16
extern "C" __global__ void ptx_cvt(unsigned* out, const float* x) {
  int t = threadIdx.x;
  unsigned short h;
  unsigned pair;
  float back;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x[t]));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(x[t]), "f"(-x[t]));
  asm("cvt.f32.f16 %0, %1;" : "=f"(back) : "h"(h));
  out[3 * t] = h;
  out[3 * t + 1] = pair;
  out[3 * t + 2] = __float_as_uint(back);
}

// 16-byte vector loads and stores with cache hints, and griddepcontrol (a no-op)
extern "C" __global__ void ptx_vec(float* y, const float* x, int offset) {
  int t = threadIdx.x;
  float a, b, c, d;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d)
               : "l"(x + 4 * t + offset));
  asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(y + 4 * t), "f"(d), "f"(c),
               "f"(b), "f"(a));
  asm volatile("griddepcontrol.launch_dependents;");
}

// inline PTX only for sm_90 and up: dead code when normcheck presents an older architecture
extern "C" __global__ void ptx_dead(float* y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(0));
#endif
  y[threadIdx.x] = 1.0f;
}
