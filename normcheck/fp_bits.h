// Exact conversions of stored 16-bit formats to float64, shared by normcheck's own compiled
// parts (oracle/fast.cpp, measure.cpp; their build keys include this file's text).
#pragma once
#include <cstdint>
#include <cstring>

// An fp16 value as float64, exactly: its exponent and significand moved into a double's fields
// (subnormal halves become double subnormals), scaled by 2^(1023-15); inf and NaN by their
// exponent.  Vectorises, unlike a table.
static inline double half_to_double(uint16_t h) {
  uint64_t em = h & 0x7fff;
  uint64_t bits = em << 42;
  double v;
  std::memcpy(&v, &bits, 8);
  v *= 0x1p1008;
  uint64_t vb;
  std::memcpy(&vb, &v, 8);
  uint64_t special = 0 - (uint64_t)(em >= 0x7c00);  // all ones for inf and NaN
  vb = (vb & ~special) | ((bits | 0x7FF0000000000000ULL) & special);
  vb |= (uint64_t)(h & 0x8000) << 48;
  std::memcpy(&v, &vb, 8);
  return v;
}
