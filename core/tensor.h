// Tensor: a dense row-major array of one DType with a static shape, owning its bytes, or reading
// them from a file mapped read-only (mapped(): a model's weights, which take memory only where
// they are read; a copy shares the mapping, and writing through data() makes the bytes the
// tensor's own first; release_pages() gives the pages read back to the kernel).
//
// Shapes are vectors of int64 extents; a scalar has shape {}. Construction checks that every extent
// is non-negative and the element count stays below kMaxElements (for an empty tensor: every extent
// below kMaxElements, the non-zero ones multiplying to at most kMaxEmptyExtents), so later index
// arithmetic cannot overflow. Values move in and out as float or int64 vectors, converted per dtype
// (float16 and bfloat16 round to nearest even; integers truncate toward zero like a C cast; the
// narrow types of core/narrow_types.h hold one element per byte).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/narrow_types.h"

namespace fusetune {

using Shape = std::vector<int64_t>;

// Upper bound on the elements of any tensor fusetune accepts (2^40): a larger figure is taken as
// a corrupt or absurd model, never as a real one.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
// An empty tensor (a zero extent) may have larger other extents, but their product stays below
// 2^62 so that strides and the element counts of sub-shapes cannot overflow int64.
inline constexpr int64_t kMaxEmptyExtents = int64_t{1} << 62;

// Element count; throws Error naming `what` if an extent is negative or the count is absurd.
int64_t checked_numel(const Shape& shape, const std::string& what);
int64_t numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "1x3x224x224"; "scalar" for {}
std::vector<int64_t> strides_of(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled

  static Tensor from_floats(DType dtype, Shape shape, std::span<const float> values);
  static Tensor from_ints(DType dtype, Shape shape, std::span<const int64_t> values);
  static Tensor from_bytes(DType dtype, Shape shape, std::vector<std::byte> bytes);
  // The tensor's bytes in a read-only file mapping that `bytes` keeps alive (core/files.h map_file).
  static Tensor mapped(DType dtype, Shape shape, std::shared_ptr<const std::byte> bytes);
  static Tensor scalar_float(DType dtype, float v) { return from_floats(dtype, {}, {&v, 1}); }
  static Tensor scalar_int(DType dtype, int64_t v) { return from_ints(dtype, {}, {&v, 1}); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  const std::byte* data() const { return mapped_ ? mapped_.get() : bytes_.data(); }
  std::byte* data();  // the tensor's own bytes (a mapped tensor's copied first)
  bool is_mapped() const { return mapped_ != nullptr; }
  void release_pages() const;

  std::vector<float> to_floats() const;
  std::vector<double> to_doubles() const;
  std::vector<int64_t> to_ints() const;
  void set_floats(std::span<const float> values);  // converts into this tensor's dtype
  void set_doubles(std::span<const double> values);
  void set_ints(std::span<const int64_t> values);
  // The same conversions on elements [first, first + values.size()) alone: what a kernel that
  // streams a large tensor in pieces reads and writes. The writes make the bytes the tensor's own
  // first (as data() does); pieces that do not overlap may be written from several threads once
  // they are.
  void read_doubles(int64_t first, std::span<double> values) const;
  void read_ints(int64_t first, std::span<int64_t> values) const;
  void write_doubles(int64_t first, std::span<const double> values);
  void write_ints(int64_t first, std::span<const int64_t> values);

  // Same bytes, new shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // Converted to another dtype: to a float through double (float8/float4 as `how` says), to an
  // integer through int64 (floats truncate, saturating at int64's range, NaN to 0) wrapped to its
  // width, to bool by comparing with zero.
  Tensor cast(DType to, NarrowCast how = {}) const;
  bool operator==(const Tensor& other) const;  // the same dtype, shape and bytes

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::vector<std::byte> bytes_;              // owned, or empty while mapped
  std::shared_ptr<const std::byte> mapped_;  // the bytes in a read-only file mapping
  void own();
};

}  // namespace fusetune
