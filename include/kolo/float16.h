// IEEE binary16 and bfloat16 conversions on the CPU. Round-to-nearest-even; NaN stays NaN;
// overflow goes to infinity. Header-only so reduction loops inline and vectorise.
#pragma once

#include <cstdint>
#include <cstring>

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float half_to_float(uint16_t h) {
  // Branch-light conversion (after Fabian Giesen's half_to_float_fast5): rescale the exponent
  // through a float multiply so denormals come out right.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent+mantissa in float position
  const float magic = bits_to_float((254u - 15u) << 23);   // 2^112 rebiases 15 -> 127
  float f = bits_to_float(em) * magic;
  if (f >= bits_to_float((127u + 16u) << 23)) f = bits_to_float(float_to_bits(f) | (255u << 23));
  return bits_to_float(float_to_bits(f) | sign);
}

inline uint16_t float_to_half(float value) {
  uint32_t x = float_to_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (x < 0x38800000u) {
    // Result is a half denormal (or zero): let the FPU round by adding 0.5 in the right place.
    float f = bits_to_float(x) + bits_to_float(126u << 23);  // + 0.5
    return static_cast<uint16_t>(sign | (float_to_bits(f) - (126u << 23)));
  }
  const uint32_t mant_odd = (x >> 13) & 1u;
  x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;  // rebias exponent, round half
  x += mant_odd;                                          // ... to even
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float bfloat16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float value) {
  uint32_t x = float_to_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);                    // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace kolo
#pragma GCC visibility pop
