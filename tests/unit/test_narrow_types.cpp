// ONNX 1.23's narrow types (float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ/E8M0, float4 E2M1, int4, uint4,
// int2, uint2): the reference conversions (core/narrow_types.h) hold their defining properties
// (every code round-trips, rounding is to nearest even at every midpoint, saturation and overflow
// as ONNX says); the generated code's conversions (the prelude, run on the host as the CUDA text it
// is) agree with them bit for bit on every float16 value, the midpoints and random floats; packed
// ONNX files round-trip; and compiled Casts, fused or not, match the reference interpreter.
// tests/conformance (ONNX 1.23's own Cast cases) holds the reference against ONNX's numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "core/error.h"
#include "core/narrow_types.h"
#include "importer/onnx_io.h"
#include "planner/fusion.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

constexpr DType kNarrowFloats[] = {DType::kF8E4M3FN, DType::kF8E4M3FNUZ, DType::kF8E5M2,
                                   DType::kF8E5M2FNUZ, DType::kF8E8M0,   DType::kF4E2M1};

int code_count(DType t) { return 1 << dtype_bits(t); }

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

// The finite non-negative values of t, ascending, with their codes.
std::vector<std::pair<float, uint8_t>> finite_ladder(DType t) {
  std::vector<std::pair<float, uint8_t>> out;
  for (int c = 0; c < code_count(t); ++c) {
    const float v = narrow_to_float(t, static_cast<uint8_t>(c));
    if (std::isfinite(v) && !std::signbit(v)) out.emplace_back(v, static_cast<uint8_t>(c));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(NarrowTypes, EveryCodeDecodesAndIsStoredBackExactly) {
  for (DType t : kNarrowFloats) {
    int nans = 0;
    for (int c = 0; c < code_count(t); ++c) {
      const float v = narrow_to_float(t, static_cast<uint8_t>(c));
      const uint8_t back = float_to_narrow(t, v, kStoreExact);
      if (std::isnan(v)) {
        ++nans;
        EXPECT_TRUE(std::isnan(narrow_to_float(t, back))) << dtype_name(t) << " code " << c;
      } else {
        EXPECT_EQ(back, c) << dtype_name(t) << " code " << c << " = " << v;
      }
    }
    const int expected_nans = t == DType::kF8E4M3FN || t == DType::kF8E5M2 ? (t == DType::kF8E5M2 ? 6 : 2)
                              : t == DType::kF4E2M1                      ? 0
                                                                         : 1;
    EXPECT_EQ(nans, expected_nans) << dtype_name(t);
    // the ladder of finite values is strictly increasing: no two codes stand for one value but zeros
    const auto ladder = finite_ladder(t);
    for (size_t i = 1; i < ladder.size(); ++i) EXPECT_LT(ladder[i - 1].first, ladder[i].first) << dtype_name(t);
  }
  // the largest finite values ONNX documents
  EXPECT_EQ(narrow_to_float(DType::kF8E4M3FN, 0x7E), 448.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E4M3FNUZ, 0x7F), 240.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E5M2, 0x7B), 57344.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E5M2FNUZ, 0x7F), 57344.0f);
  EXPECT_EQ(narrow_to_float(DType::kF4E2M1, 0x7), 6.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, 0xFE), std::ldexp(1.0f, 127));
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, 0x00), std::ldexp(1.0f, -127));
}

TEST(NarrowTypes, RoundingIsToNearestEvenAndOverflowFollowsSaturate) {
  for (DType t : kNarrowFloats) {
    if (t == DType::kF8E8M0) continue;  // exponent-only: its round_mode is tested below
    const auto ladder = finite_ladder(t);
    for (size_t i = 1; i < ladder.size(); ++i) {
      const auto [lo, lo_code] = ladder[i - 1];
      const auto [hi, hi_code] = ladder[i];
      const float mid = (lo + hi) / 2;  // exact: both are short binary fractions
      const uint8_t even = (lo_code & 1) == 0 ? lo_code : hi_code;
      EXPECT_EQ(float_to_narrow(t, mid), even) << dtype_name(t) << " midpoint " << mid;
      EXPECT_EQ(float_to_narrow(t, std::nextafter(mid, 0.0f)), lo_code) << dtype_name(t) << " below " << mid;
      EXPECT_EQ(float_to_narrow(t, std::nextafter(mid, INFINITY)), hi_code) << dtype_name(t) << " above " << mid;
      // the negative side mirrors the positive one, except that FNUZ types have no -0
      const uint8_t neg = float_to_narrow(t, -std::nextafter(mid, INFINITY));
      EXPECT_EQ(narrow_to_float(t, neg), -hi) << dtype_name(t);
    }
    const float max = ladder.back().first;
    const uint8_t max_code = ladder.back().second;
    const float beyond = max * 1.25f;
    EXPECT_EQ(float_to_narrow(t, beyond, {true}), max_code) << dtype_name(t);
    EXPECT_EQ(float_to_narrow(t, INFINITY, {true}), max_code) << dtype_name(t);
    EXPECT_EQ(narrow_to_float(t, float_to_narrow(t, -INFINITY, {true})), -max) << dtype_name(t);
    const float overflowed = narrow_to_float(t, float_to_narrow(t, beyond, {false}));
    if (t == DType::kF8E5M2) {
      EXPECT_EQ(overflowed, INFINITY);
      EXPECT_EQ(narrow_to_float(t, float_to_narrow(t, -INFINITY, {false})), -INFINITY);
    } else if (t == DType::kF4E2M1) {
      EXPECT_EQ(overflowed, max) << "float4 always saturates";
    } else {
      EXPECT_TRUE(std::isnan(overflowed)) << dtype_name(t);
    }
    const bool fnuz = t == DType::kF8E4M3FNUZ || t == DType::kF8E5M2FNUZ;
    EXPECT_EQ(float_to_narrow(t, -1e-30f), fnuz ? 0 : 1 << (dtype_bits(t) - 1)) << dtype_name(t) << ": -0";
  }
  // E8M0 keeps the exponent: up, down and nearest (ties and above go up, as onnx.numpy_helper)
  const float x = 1.5f, y = 1.25f;
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, float_to_narrow(DType::kF8E8M0, x, {true, RoundMode::kUp})), 2.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, float_to_narrow(DType::kF8E8M0, x, {true, RoundMode::kDown})), 1.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, float_to_narrow(DType::kF8E8M0, x, {true, RoundMode::kNearest})), 2.0f);
  EXPECT_EQ(narrow_to_float(DType::kF8E8M0, float_to_narrow(DType::kF8E8M0, y, {true, RoundMode::kNearest})), 1.0f);
  const float huge = std::ldexp(1.5f, 127);
  EXPECT_EQ(float_to_narrow(DType::kF8E8M0, huge, {true, RoundMode::kUp}), 0xFE);
  EXPECT_EQ(float_to_narrow(DType::kF8E8M0, huge, {false, RoundMode::kUp}), 0xFF);
  // integers wrap to their width
  EXPECT_EQ(wrap_narrow_int(DType::kI4, -9), 7);
  EXPECT_EQ(wrap_narrow_int(DType::kU4, -1), 15);
  EXPECT_EQ(wrap_narrow_int(DType::kI2, 2), -2);
  EXPECT_EQ(wrap_narrow_int(DType::kU2, 7), 3);
}

// Runs the prelude's conversions over xs on the host, as generated code runs them on a GPU.
// Kernel "enc" writes, per input, one code for each (type, saturate, mode) column; "dec" decodes
// every code of each type.
constexpr const char* kConversionKernels = R"(
extern "C" __global__ void __launch_bounds__(64) enc(FT_GLOBAL(const float) x, FT_GLOBAL(unsigned char) out, FT_GLOBAL(const long long) n) {
  long long i = (long long)blockIdx.x * 64 + threadIdx.x;
  if (i >= n[0]) return;
  float v = x[i];
  out[i * 16 + 0] = ft_f2e4m3fn(v, 1); out[i * 16 + 1] = ft_f2e4m3fn(v, 0);
  out[i * 16 + 2] = ft_f2e4m3fnuz(v, 1); out[i * 16 + 3] = ft_f2e4m3fnuz(v, 0);
  out[i * 16 + 4] = ft_f2e5m2(v, 1); out[i * 16 + 5] = ft_f2e5m2(v, 0);
  out[i * 16 + 6] = ft_f2e5m2fnuz(v, 1); out[i * 16 + 7] = ft_f2e5m2fnuz(v, 0);
  out[i * 16 + 8] = ft_f2e2m1(v, 1); out[i * 16 + 9] = ft_f2e2m1(v, 0);
  out[i * 16 + 10] = ft_f2e8m0(v, 1, 0); out[i * 16 + 11] = ft_f2e8m0(v, 0, 0); out[i * 16 + 12] = ft_f2e8m0(v, 1, 1);
  out[i * 16 + 13] = ft_f2e8m0(v, 1, 2); out[i * 16 + 14] = ft_f2e8m0(v, 0, 2); out[i * 16 + 15] = ft_f2e8m0(v, 0, 1);
}
extern "C" __global__ void __launch_bounds__(64) dec(FT_GLOBAL(float) out) {
  int c = blockIdx.x * 64 + threadIdx.x;
  if (c >= 256) return;
  unsigned char u = (unsigned char)c;
  out[c] = ft_e4m3fn2f(u); out[256 + c] = ft_e4m3fnuz2f(u); out[512 + c] = ft_e5m22f(u);
  out[768 + c] = ft_e5m2fnuz2f(u); out[1024 + c] = ft_e8m02f(u); out[1280 + c] = ft_e2m12f((unsigned char)(c & 15));
}
)";

TEST(NarrowTypes, GeneratedConversionsAgreeWithTheReferenceBitForBit) {
  const std::string text = codegen::emit_cuda({}) + kConversionKernels;
  simt::Module m(text);
  // every float16 value, the midpoints of every type's ladder (and their neighbours), specials,
  // and random 32-bit patterns
  std::vector<float> xs;
  for (uint32_t h = 0; h < 65536; ++h) xs.push_back(half_to_float(static_cast<uint16_t>(h)));
  for (DType t : kNarrowFloats) {
    const auto ladder = finite_ladder(t);
    for (size_t i = 1; i < ladder.size(); ++i) {
      const float mid = (ladder[i - 1].first + ladder[i].first) / 2;
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        xs.push_back(v);
        xs.push_back(-v);
      }
    }
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4e38f, std::ldexp(1.0f, -127)}) xs.push_back(v);
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  for (int k = 0; k < 20000; ++k) {
    const uint32_t bits = rng();
    float v;
    std::memcpy(&v, &bits, 4);
    xs.push_back(v);
  }
  const auto n = static_cast<int64_t>(xs.size());
  std::vector<uint8_t> codes(static_cast<size_t>(n) * 16);
  int64_t nn = n;
  const simt::LaunchResult r = simt::launch(m.kernel("enc"), {xs.data(), codes.data(), &nn},
                                            {xs.size() * 4, codes.size(), sizeof nn}, {(n + 63) / 64, 64, 0}, {});
  ASSERT_TRUE(r.findings.empty()) << r.findings.front();
  struct Column {
    DType t;
    NarrowCast how;
  };
  const Column columns[16] = {
      {DType::kF8E4M3FN, {true}},   {DType::kF8E4M3FN, {false}}, {DType::kF8E4M3FNUZ, {true}},
      {DType::kF8E4M3FNUZ, {false}}, {DType::kF8E5M2, {true}},   {DType::kF8E5M2, {false}},
      {DType::kF8E5M2FNUZ, {true}}, {DType::kF8E5M2FNUZ, {false}}, {DType::kF4E2M1, {true}},
      {DType::kF4E2M1, {false}},    {DType::kF8E8M0, {true, RoundMode::kUp}}, {DType::kF8E8M0, {false, RoundMode::kUp}},
      {DType::kF8E8M0, {true, RoundMode::kDown}}, {DType::kF8E8M0, {true, RoundMode::kNearest}},
      {DType::kF8E8M0, {false, RoundMode::kNearest}}, {DType::kF8E8M0, {false, RoundMode::kDown}},
  };
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 16; ++c) {
      const uint8_t want = float_to_narrow(columns[c].t, xs[static_cast<size_t>(i)], columns[c].how);
      const uint8_t got = codes[static_cast<size_t>(i * 16 + c)];
      if (got != want && ++mismatches <= 5) {
        ADD_FAILURE() << dtype_name(columns[c].t) << " saturate=" << columns[c].how.saturate << " of " << xs[i]
                      << ": generated code 0x" << std::hex << int(got) << ", reference 0x" << int(want)
                      << std::dec << " (seed " << seed << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << n * 16 << " conversions";
  std::vector<float> decoded(1536);
  const simt::LaunchResult d = simt::launch(m.kernel("dec"), {decoded.data()}, {decoded.size() * 4}, {4, 64, 0}, {});
  ASSERT_TRUE(d.findings.empty()) << d.findings.front();
  const DType order[] = {DType::kF8E4M3FN, DType::kF8E4M3FNUZ, DType::kF8E5M2, DType::kF8E5M2FNUZ, DType::kF8E8M0, DType::kF4E2M1};
  for (int k = 0; k < 6; ++k) {
    for (int c = 0; c < 256; ++c) {
      const float want = narrow_to_float(order[k], static_cast<uint8_t>(order[k] == DType::kF4E2M1 ? c & 15 : c));
      EXPECT_TRUE(same_float(decoded[static_cast<size_t>(k * 256 + c)], want))
          << dtype_name(order[k]) << " code " << c << ": " << decoded[k * 256 + c] << " vs " << want;
    }
  }
  if (backend::nvrtc_available()) {
    EXPECT_FALSE(backend::compile_cuda(text, "sm_90").cubin.empty());
  } else {
    std::printf("NOTE: NVRTC not available; the conversion kernels are not compiled for sm_90\n");
  }
}

TEST(NarrowTypes, PackedFilesRoundTripInOnnxLayout) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ft_narrow_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // int4 [7, -8, -7]: low nibble first, the odd element padded with zero bits
  const Tensor i4 = Tensor::from_ints(DType::kI4, {3}, std::vector<int64_t>{7, -8, -7});
  EXPECT_EQ(importer::pack_elements(i4), (std::vector<std::byte>{std::byte{0x87}, std::byte{0x09}}));
  const Tensor u2 = Tensor::from_ints(DType::kU2, {5}, std::vector<int64_t>{1, 2, 3, 0, 3});
  EXPECT_EQ(importer::pack_elements(u2), (std::vector<std::byte>{std::byte{0x39}, std::byte{0x03}}));
  std::vector<float> f4v{0.5f, -6.0f, 1.5f, 0.0f, -0.5f};
  const Tensor f4 = Tensor::from_floats(DType::kF4E2M1, {5}, f4v);
  for (const Tensor* t : {&i4, &u2, &f4}) {
    importer::write_tensor_file(dir / "t.pb", "t", *t);
    EXPECT_EQ(std::filesystem::file_size(dir / "t.pb") < 64, true);
    const importer::NamedTensor back = importer::read_tensor_file(dir / "t.pb");
    EXPECT_EQ(back.tensor.dtype(), t->dtype());
    EXPECT_TRUE(back.tensor == *t) << dtype_name(t->dtype());
  }
  EXPECT_EQ(f4.to_floats(), f4v);
  std::filesystem::remove_all(dir);
  // int32_data holds float8 codes one per value, and 4-bit elements packed two to a value
  onnx::TensorProto f8;
  f8.set_data_type(17);  // FLOAT8E4M3FN
  f8.add_dims(2);
  f8.add_int32_data(0x38);
  f8.add_int32_data(0xB8);
  EXPECT_EQ(importer::decode_tensor(f8, dir).to_floats(), (std::vector<float>{1.0f, -1.0f}));
  onnx::TensorProto packed;
  packed.set_data_type(22);  // INT4
  packed.add_dims(3);
  packed.add_int32_data(0x87);
  packed.add_int32_data(0x09);
  EXPECT_EQ(importer::decode_tensor(packed, dir).to_ints(), (std::vector<int64_t>{7, -8, -7}));
  packed.add_int32_data(0x00);  // one byte more than 3 elements need
  EXPECT_THROW(importer::decode_tensor(packed, dir), Error);
}

// x * scale -> Cast(to T, saturate) -> Cast(to float) -> Add x, for every narrow type: compiled
// as one fused group (the narrowing happens in registers) and as one group per node (through
// stored tensors of T), against the reference interpreter.
TEST(NarrowTypes, CompiledCastsMatchTheReferenceFusedOrNot) {
  using testing::add_input;
  using testing::add_op;
  using testing::attrs;
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {3, 5, 40});
  struct Chain {
    DType t;
    bool saturate;
    float scale;
  };
  std::vector<Chain> chains;
  for (DType t : kNarrowFloats) {
    const float scale = t == DType::kF8E5M2 || t == DType::kF8E5M2FNUZ ? 4e4f : (t == DType::kF8E8M0 ? 1e3f : 300.0f);
    chains.push_back({t, true, scale});
    chains.push_back({t, false, scale});
  }
  for (DType t : {DType::kI4, DType::kU4, DType::kI2, DType::kU2, DType::kI8}) chains.push_back({t, true, 40.0f});
  std::vector<planner::FusionGroup> fused, per_node;
  for (const Chain& c : chains) {
    const size_t first = g.nodes().size();
    const int s = g.add_constant("s" + std::to_string(first), Tensor::from_floats(DType::kF32, {}, std::vector<float>{c.scale}));
    const int scaled = add_op(g, "Mul", {x, s});
    Attributes a = attrs({{"to", static_cast<int64_t>(dtype_to_onnx(c.t))}});
    if (is_narrow_float(c.t)) a.set("saturate", int64_t{c.saturate});
    const int narrow = add_op(g, "Cast", {scaled}, a);
    const int back = add_op(g, "Cast", {narrow}, attrs({{"to", int64_t{1}}}));
    const int out = add_op(g, "Add", {back, x});
    g.outputs().push_back(out);
    planner::FusionGroup all;
    for (size_t k = first; k < g.nodes().size(); ++k) {
      all.nodes.push_back(static_cast<int>(k));
      planner::FusionGroup one;
      one.nodes = {static_cast<int>(k)};
      planner::describe_group(g, one);
      one.outputs = {g.nodes()[k].outputs[0]};
      per_node.push_back(one);
    }
    planner::describe_group(g, all);
    all.outputs = {out};
    fused.push_back(all);
  }
  auto config = [&](const planner::FusionGroup& fg) { return testing::best_config(g, fg); };
  testing::check_groups(g, fused, config, "narrow casts fused");
  testing::check_groups(g, per_node, config, "narrow casts per node");
}

}  // namespace
}  // namespace fusetune
