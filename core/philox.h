// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3" (SC'11), as Random123, cuRAND and PyTorch's CUDA generator define it: a 128-bit
// counter and a 64-bit key map to four 32-bit words through ten rounds of two 32x32->64
// multiplications, the key bumped by the Weyl constants between rounds.
//
// Takes a counter and a key; guarantees the published known-answer vectors (tests/unit/test_random.cpp
// checks three of Random123's) and, through random_uniform, the value the canonical RandomUniform
// op gives element `index` of its output (docs/canonical-ops.md): the generated kernels compute the
// same function from the same formula (codegen/emit_common.h's ft_philox_uniform), so the reference
// and a compiled plan draw bit-identical uniforms.
#pragma once

#include <array>
#include <cstdint>

namespace fusetune {

using PhiloxWords = std::array<uint32_t, 4>;

PhiloxWords philox4x32_10(PhiloxWords counter, std::array<uint32_t, 2> key);

// The uniform in [0, 1) of element `index` (the counter's low 64 bits; its high 64 are zero) under
// key: word `word` (0-3) of the block, its top 24 bits times 2^-24 (exact in float and double).
float random_uniform(uint64_t key, uint64_t index, int word);

}  // namespace fusetune
