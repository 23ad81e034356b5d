// normcheck cpu backend: WMMA (tensor cores) is not emulated.  A file that includes <mma.h> but
// whose norm kernels do not use it compiles; a kernel that reaches a WMMA call fails its launch
// naming it (detail wmma), and normcheck says it cannot judge it on the cpu backend.
#pragma once
#include "normcheck_simt.h"

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace experimental {
namespace precision {
struct u4 {};
struct s4 {};
struct b1 {};
}  // namespace precision
}  // namespace experimental
namespace precision {
struct tf32 {};
}  // namespace precision
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int num_elements = 8;
  T x[8];
};
template <class... A>
inline void fill_fragment(A&&...) { ::ncsimt::unsupported("wmma"); }
template <class... A>
inline void load_matrix_sync(A&&...) { ::ncsimt::unsupported("wmma"); }
template <class... A>
inline void store_matrix_sync(A&&...) { ::ncsimt::unsupported("wmma"); }
template <class... A>
inline void mma_sync(A&&...) { ::ncsimt::unsupported("wmma"); }
template <class... A>
inline void bmma_sync(A&&...) { ::ncsimt::unsupported("wmma"); }
}  // namespace wmma
}  // namespace nvcuda
