// normcheck cpu backend: the CUB types the supported collectives use.
#pragma once
#include "config.cuh"
namespace cub {
struct NullType {};
template <typename K, typename V>
struct KeyValuePair {
  K key;
  V value;
};
namespace detail {
template <typename... T> struct nc_always_false { static constexpr bool value = false; };
template <auto... V> struct nc_always_false_v { static constexpr bool value = false; };
}  // namespace detail
}  // namespace cub
