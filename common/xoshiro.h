// xoshiro256** (Blackman and Vigna): the project's own small random
// generator where a draw must be the same on every machine and library
// (the detector's augmentations, hyperparameter evolution), unlike the
// distributions of <random>. Header-only; callers seed the state (never all
// zero) and build their draws on Next().
#ifndef ELASTRUN_COMMON_XOSHIRO_H_
#define ELASTRUN_COMMON_XOSHIRO_H_

#include <cstdint>

namespace elastrun {

// splitmix64's step: spreads a seed over a state's words.
inline uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The next 64 bits of the stream in `s`, advancing it.
inline uint64_t Xoshiro256Next(uint64_t* s) {
  const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_XOSHIRO_H_
