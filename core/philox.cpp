#include "core/philox.h"

namespace fusetune {

namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key's Weyl increments

void round(PhiloxWords& c, const std::array<uint32_t, 2>& k) {
  const uint64_t p0 = uint64_t{kM0} * c[0], p1 = uint64_t{kM1} * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

PhiloxWords philox4x32_10(PhiloxWords counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) key = {key[0] + kW0, key[1] + kW1};
    round(counter, key);
  }
  return counter;
}

float random_uniform(uint64_t key, uint64_t index, int word) {
  const PhiloxWords w = philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
                                      {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  return static_cast<float>(w[static_cast<size_t>(word & 3)] >> 8) * 0x1p-24f;
}

}  // namespace fusetune
