// normcheck cpu backend: the CUB types the supported collectives use.
#pragma once
#include "config.cuh"
namespace cub {
struct NullType {};
// cub::KeyValuePair (util_type.cuh): a key and a value, with CUB's constructors and comparisons
template <typename K, typename V>
struct KeyValuePair {
  using Key = K;
  using Value = V;
  K key;
  V value;
  KeyValuePair() = default;
  __host__ __device__ __forceinline__ KeyValuePair(K const& k, V const& v) : key(k), value(v) {}
  __host__ __device__ __forceinline__ bool operator==(const KeyValuePair& b) const {
    return (value == b.value) && (key == b.key);
  }
  __host__ __device__ __forceinline__ bool operator!=(const KeyValuePair& b) const {
    return (value != b.value) || (key != b.key);
  }
};
namespace detail {
template <typename... T> struct nc_always_false { static constexpr bool value = false; };
template <auto... V> struct nc_always_false_v { static constexpr bool value = false; };
}  // namespace detail
}  // namespace cub
