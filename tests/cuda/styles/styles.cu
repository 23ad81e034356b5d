// Kernels in the styles of public normalisation kernels, one construct each that once stopped the
// cpu backend, for tests/test_cuda_surface.py: each checks from its spec without edits.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cub/cub.cuh>
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

// Apex contrib-style: a static constructor that stats a path as the module loads (a registry of
// kernels, a config file looked for); its answer -- "not there" in the sandbox -- changes nothing
static struct ProbeAtLoad {
  int seen;
  ProbeAtLoad() {
    struct stat st;
    seen = stat("/proc/driver/nvidia/version", &st) == 0;
  }
} probe_at_load;

// PyTorch-style: helpers under #if defined(__CUDACC__), shared memory declared with __align__.
#if defined(__CUDACC__)
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
#endif

template <typename T>
__global__ void __launch_bounds__(256) rms_aligned(T* __restrict__ y, const T* __restrict__ x,
                                                   const T* __restrict__ w, float eps, int cols) {
  extern __shared__ __align__(sizeof(float)) char smem[];
  float* warp_sums = reinterpret_cast<float*>(smem);
  const T* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = (float)xr[j];
    s += v * v;
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int k = 0; k < (int)(blockDim.x / 32); ++k) t += warp_sums[k];
    warp_sums[0] = rsqrtf(t / cols + eps);
  }
  __syncthreads();
  float r = warp_sums[0];
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = (T)((float)xr[j] * r * (float)w[j]);
}
template __global__ void rms_aligned<__half>(__half*, const __half*, const __half*, float, int);

// candle-style: the bf16 kernel exists only for sm_80 and up
#if __CUDA_ARCH__ >= 800
extern "C" __global__ void rms_bf16(__nv_bfloat16* y, const __nv_bfloat16* x,
                                    const __nv_bfloat16* w, float eps, int cols) {
  __shared__ float part[32];
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) { float v = __bfloat162float(xr[j]); s += v * v; }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  float t = 0.f;
  for (int k = 0; k < (int)(blockDim.x / 32); ++k) t += part[k];
  float r = __frsqrt_rn(__fdiv_rn(t, (float)cols) + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2bfloat16_rn(__bfloat162float(xr[j]) * r * __bfloat162float(w[j]));
}
#endif

// ONNX Runtime-style: (Σx, Σx²) as a cub::KeyValuePair, reduced with cub::BlockReduce
struct PairSum {
  __device__ cub::KeyValuePair<float, float> operator()(const cub::KeyValuePair<float, float>& a,
                                                        const cub::KeyValuePair<float, float>& b) const {
    return cub::KeyValuePair<float, float>(a.key + b.key, a.value + b.value);
  }
};
template <typename T, int TPB>
__global__ void ln_kvp(T* y, const T* x, const T* g, const T* b, float eps, int cols,
                       bool simplified) {
  using BlockReduce = cub::BlockReduce<cub::KeyValuePair<float, float>, TPB>;
  __shared__ typename BlockReduce::TempStorage tmp;
  __shared__ float mu, rs;
  const T* xr = x + (size_t)blockIdx.x * cols;
  cub::KeyValuePair<float, float> acc(0.f, 0.f);
  float inv = 1.f / cols;
  for (int j = threadIdx.x; j < cols; j += TPB) {
    float v = (float)xr[j];
    acc = PairSum()(acc, cub::KeyValuePair<float, float>(v * inv, v * v * inv));
  }
  acc = BlockReduce(tmp).Reduce(acc, PairSum());
  if (threadIdx.x == 0) {
    mu = simplified ? 0.f : acc.key;
    rs = rsqrtf(acc.value - mu * mu + eps);
  }
  __syncthreads();
  // the variance above is one-pass: subtract the mean again, two-pass, for the output
  __shared__ float var2;
  float d2 = 0.f;
  for (int j = threadIdx.x; j < cols; j += TPB) { float d = (float)xr[j] - mu; d2 += d * d; }
  using BR = cub::BlockReduce<float, TPB>;
  __shared__ typename BR::TempStorage tmp2;
  d2 = BR(tmp2).Sum(d2);
  if (threadIdx.x == 0) var2 = d2 / cols;
  __syncthreads();
  float r = rsqrtf(var2 + eps);
  (void)rs;
  for (int j = threadIdx.x; j < cols; j += TPB)
    y[(size_t)blockIdx.x * cols + j] = (T)(((float)xr[j] - mu) * r * (float)g[j] + (float)b[j]);
}
template __global__ void ln_kvp<float, 128>(float*, const float*, const float*, const float*, float, int, bool);

// TransformerEngine-style: every pointer and size in a params struct passed by value
enum class Mode : int { kPlain = 0, kZeroCentered = 1 };
struct Params {
  const void* x;
  const void* gamma;
  void* z;
  void* rs;
  int rows;
  int cols;
  float epsilon;
  Mode mode;
};
__global__ void rms_params(Params p) {
  const float* x = static_cast<const float*>(p.x) + (size_t)blockIdx.x * p.cols;
  const float* g = static_cast<const float*>(p.gamma);
  float* z = static_cast<float*>(p.z) + (size_t)blockIdx.x * p.cols;
  __shared__ float r;
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int j = 0; j < p.cols; ++j) s += x[j] * x[j];
    r = 1.f / sqrtf(s / p.cols + p.epsilon);
    static_cast<float*>(p.rs)[blockIdx.x] = r;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.cols; j += blockDim.x) {
    float gj = p.mode == Mode::kZeroCentered ? 1.f + g[j] : g[j];
    z[j] = x[j] * r * gj;
  }
}

// TensorRT-LLM / vLLM-style host launcher: attributes, the device's properties, a stream, and
// the kernel launched with <<<grid, block, smem, stream>>> or with cudaLaunchKernelEx
template <typename T, int BLOCK>
__global__ void rms_host_kernel(T* y, const T* x, const T* w, float eps, int cols) {
  __shared__ typename cub::BlockReduce<float, BLOCK>::TempStorage tmp;
  __shared__ float r;
  const T* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += BLOCK) { float v = (float)xr[j]; s += v * v; }
  s = cub::BlockReduce<float, BLOCK>(tmp).Sum(s);
  if (threadIdx.x == 0) r = rsqrtf(s / cols + eps);
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += BLOCK)
    y[(size_t)blockIdx.x * cols + j] = (T)((float)xr[j] * r * (float)w[j]);
}
template <typename T>
void launch_rms(T* y, const T* x, const T* w, float eps, int rows, int cols, cudaStream_t stream,
                bool use_ex) {
  int dev = 0, sms = 0;
  // llm.c / TensorRT-LLM-style probes of host code: a device node, a library, an environment
  // variable, the executable's path, a file opened for reading -- each answered "not there"
  bool probes = access("/dev/nvidiactl", F_OK) == 0 || access("libnvToolsExt.so", R_OK) == 0;
  struct stat st;
  probes |= stat("/sys/class/drm", &st) == 0 || std::getenv("NORMCHECK_NO_SUCH_VARIABLE");
  char exe[256];
  probes |= readlink("/proc/self/exe", exe, sizeof exe) > 0;
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) { probes = true; std::fclose(f); }
  (void)probes;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaFuncSetAttribute(rms_host_kernel<T, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);
  if (sms <= 0) return;
  if (!use_ex) {
    rms_host_kernel<T, 128><<<rows, 128, 0, stream>>>(y, x, w, eps, cols);
  } else {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(rows);
    config.blockDim = dim3(128);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, rms_host_kernel<T, 128>, y, x, w, eps, cols);
  }
}
template void launch_rms<__half>(__half*, const __half*, const __half*, float, int, int, cudaStream_t, bool);

// FlashInfer-style host launcher: the kernel taken as a typed pointer, its arguments in an
// untyped array, launched through the runtime's cudaLaunchKernel((void*)kernel, ...) -- or the
// cooperative launch, or a reinterpret_cast (how = 0, 1, 2); 3: the kernel held in a void*
template <typename T>
void launch_rms_void_args(T* y, const T* x, const T* w, float eps, int rows, int cols,
                          cudaStream_t stream, int how) {
  auto kernel = rms_host_kernel<T, 128>;
  void* args[] = {&y, &x, &w, &eps, &cols};
  dim3 grid(rows), block(128);
  cudaError_t e;
  if (how == 0)
    e = cudaLaunchKernel((void*)kernel, grid, block, args, 0, stream);
  else if (how == 1)
    e = cudaLaunchCooperativeKernel((void*)kernel, grid, block, args, 0, stream);
  else if (how == 2)
    e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, 0, stream);
  else {  // a kernel held as a void*: its parameters' types are nowhere to be found
    const void* fn = (const void*)kernel;
    e = cudaLaunchKernel(fn, grid, block, args, 0, stream);
  }
  if (e != cudaSuccess) std::printf("launch failed: %s\n", cudaGetErrorString(e));
}
template void launch_rms_void_args<__half>(__half*, const __half*, const __half*, float, int, int,
                                           cudaStream_t, int);

// FlashInfer-style: griddepcontrol PTX under the sm_90 guard, vector loads through cub::BlockLoad
template <typename T>
__global__ void rms_pdl(T* y, const T* x, const T* w, float eps, int cols) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;");
#endif
  using Load = cub::BlockLoad<float, 64, 4, cub::BLOCK_LOAD_TRANSPOSE>;
  __shared__ typename Load::TempStorage lt;
  __shared__ typename cub::BlockReduce<float, 64>::TempStorage rt;
  __shared__ float r;
  float v[4];
  Load(lt).Load(x + (size_t)blockIdx.x * cols, v, cols, 0.f);
  float s = 0.f;
  for (int k = 0; k < 4; ++k) s += v[k] * v[k];
  s = cub::BlockReduce<float, 64>(rt).Sum(s);
  if (threadIdx.x == 0) r = rsqrtf(s / cols + eps);
  __syncthreads();
  for (int k = 0; k < 4; ++k) {
    int j = threadIdx.x * 4 + k;
    if (j < cols) y[(size_t)blockIdx.x * cols + j] = (T)(v[k] * r * (float)w[j]);
  }
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
template __global__ void rms_pdl<float>(float*, const float*, const float*, float, int);
