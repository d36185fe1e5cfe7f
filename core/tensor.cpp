#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace fusetune {

int64_t checked_numel(const Shape& shape, const std::string& what) {
  int64_t n = 1;       // product of the non-zero extents
  bool empty = false;  // a zero extent: no elements, but the other extents still feed strides and sub-shape counts
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    check(d >= 0, what, ": dimension ", i, " is negative (", d, ")");
    if (d == 0) {
      empty = true;
      continue;
    }
    check(d <= kMaxElements && n <= kMaxEmptyExtents / d, what, ": shape ", shape_str(shape),
          " is absurdly large (more than 2^40 elements)");
    n *= d;
  }
  if (empty) return 0;
  check(n <= kMaxElements, what, ": shape ", shape_str(shape), " is absurdly large (more than 2^40 elements)");
  return n;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), numel_(checked_numel(shape_, "tensor")) {
  check(dtype_ != DType::kUndefined, "tensor of undefined dtype");
  bytes_.assign(static_cast<size_t>(numel_) * dtype_size(dtype_), std::byte{0});
}

Tensor Tensor::from_floats(DType dtype, Shape shape, std::span<const float> values) {
  Tensor t(dtype, std::move(shape));
  t.set_floats(values);
  return t;
}

Tensor Tensor::from_ints(DType dtype, Shape shape, std::span<const int64_t> values) {
  Tensor t(dtype, std::move(shape));
  t.set_ints(values);
  return t;
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, std::vector<std::byte> bytes) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = checked_numel(t.shape_, "tensor");
  check(bytes.size() == static_cast<size_t>(t.numel_) * dtype_size(dtype), "tensor data holds ",
        bytes.size(), " bytes, but shape ", shape_str(t.shape_), " of ", dtype_name(dtype), " needs ",
        static_cast<size_t>(t.numel_) * dtype_size(dtype));
  t.bytes_ = std::move(bytes);
  return t;
}

Tensor Tensor::mapped(DType dtype, Shape shape, std::shared_ptr<const std::byte> bytes) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = checked_numel(t.shape_, "tensor");
  check(dtype != DType::kUndefined && (bytes != nullptr || t.numel_ == 0), "a mapped tensor without bytes");
  t.mapped_ = std::move(bytes);
  return t;
}

std::byte* Tensor::data() {
  own();
  return bytes_.data();
}

void Tensor::own() {
  if (!mapped_) return;
  bytes_.assign(mapped_.get(), mapped_.get() + nbytes());
  mapped_.reset();
}

void Tensor::release_pages() const {
  if (!mapped_ || nbytes() == 0) return;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(mapped_.get());
  const uintptr_t first = (begin + page - 1) / page * page;  // whole pages only: a neighbour's share stays
  const uintptr_t last = (begin + nbytes()) / page * page;
  // A private, never written mapping: the pages dropped are read from the file again if touched.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool Tensor::operator==(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         (nbytes() == 0 || std::memcmp(data(), other.data(), nbytes()) == 0);
}

namespace {

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Reads element i as double (exact for every dtype but 64-bit integers beyond 2^53).
double read_double(DType t, const std::byte* base, int64_t i) {
  const std::byte* p = base + i * static_cast<int64_t>(dtype_size(t));
  switch (t) {
    case DType::kF32: return load<float>(p);
    case DType::kF16: return half_to_float(load<uint16_t>(p));
    case DType::kBF16: return bfloat16_to_float(load<uint16_t>(p));
    case DType::kF64: return load<double>(p);
    case DType::kI8: return load<int8_t>(p);
    case DType::kI16: return load<int16_t>(p);
    case DType::kI32: return load<int32_t>(p);
    case DType::kI64: return static_cast<double>(load<int64_t>(p));
    case DType::kU8: return load<uint8_t>(p);
    case DType::kU16: return load<uint16_t>(p);
    case DType::kU32: return load<uint32_t>(p);
    case DType::kU64: return static_cast<double>(load<uint64_t>(p));
    case DType::kBool: return load<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0:
    case DType::kF4E2M1: return narrow_to_float(t, load<uint8_t>(p));
    case DType::kI4:
    case DType::kI2: return load<int8_t>(p);
    case DType::kU4:
    case DType::kU2: return load<uint8_t>(p);
    case DType::kUndefined: break;
  }
  return 0.0;
}

int64_t read_int(DType t, const std::byte* base, int64_t i) {
  const std::byte* p = base + i * static_cast<int64_t>(dtype_size(t));
  switch (t) {
    case DType::kI64: return load<int64_t>(p);
    case DType::kU64: return static_cast<int64_t>(load<uint64_t>(p));
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0:
    case DType::kF4E2M1: {
      const double d = read_double(t, base, i);
      if (std::isnan(d)) return 0;
      if (d >= 9.2e18) return std::numeric_limits<int64_t>::max();
      if (d <= -9.2e18) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    }
    default: return static_cast<int64_t>(read_double(t, base, i));
  }
}

// Converts a double to an integer type the way a C cast does, but defined for out-of-range values
// (they saturate) and NaN (zero), so corrupt data cannot trigger undefined behaviour.
template <typename T>
T saturate(double d) {
  if (std::isnan(d)) return 0;
  if (d <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(d);
}

void write_double(DType t, std::byte* base, int64_t i, double v) {
  std::byte* p = base + i * static_cast<int64_t>(dtype_size(t));
  switch (t) {
    case DType::kF32: store<float>(p, static_cast<float>(v)); break;
    case DType::kF16: store<uint16_t>(p, float_to_half(static_cast<float>(v))); break;
    case DType::kBF16: store<uint16_t>(p, float_to_bfloat16(static_cast<float>(v))); break;
    case DType::kF64: store<double>(p, v); break;
    case DType::kI8: store<int8_t>(p, saturate<int8_t>(v)); break;
    case DType::kI16: store<int16_t>(p, saturate<int16_t>(v)); break;
    case DType::kI32: store<int32_t>(p, saturate<int32_t>(v)); break;
    case DType::kI64: store<int64_t>(p, saturate<int64_t>(v)); break;
    case DType::kU8: store<uint8_t>(p, saturate<uint8_t>(v)); break;
    case DType::kU16: store<uint16_t>(p, saturate<uint16_t>(v)); break;
    case DType::kU32: store<uint32_t>(p, saturate<uint32_t>(v)); break;
    case DType::kU64: store<uint64_t>(p, saturate<uint64_t>(v)); break;
    case DType::kBool: store<uint8_t>(p, v != 0.0 ? 1 : 0); break;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0:
    case DType::kF4E2M1: store<uint8_t>(p, float_to_narrow(t, static_cast<float>(v), kStoreExact)); break;
    case DType::kI4:
    case DType::kI2: store<int8_t>(p, static_cast<int8_t>(wrap_narrow_int(t, saturate<int64_t>(v)))); break;
    case DType::kU4:
    case DType::kU2: store<uint8_t>(p, static_cast<uint8_t>(wrap_narrow_int(t, saturate<int64_t>(v)))); break;
    case DType::kUndefined: break;
  }
}

void write_int(DType t, std::byte* base, int64_t i, int64_t v) {
  std::byte* p = base + i * static_cast<int64_t>(dtype_size(t));
  switch (t) {
    case DType::kI64: store<int64_t>(p, v); break;
    case DType::kU64: store<uint64_t>(p, static_cast<uint64_t>(v)); break;
    case DType::kI32: store<int32_t>(p, static_cast<int32_t>(v)); break;  // wraps, as numpy's astype
    case DType::kU32: store<uint32_t>(p, static_cast<uint32_t>(v)); break;
    case DType::kI16: store<int16_t>(p, static_cast<int16_t>(v)); break;
    case DType::kU16: store<uint16_t>(p, static_cast<uint16_t>(v)); break;
    case DType::kI8: store<int8_t>(p, static_cast<int8_t>(v)); break;
    case DType::kU8: store<uint8_t>(p, static_cast<uint8_t>(v)); break;
    case DType::kI4:
    case DType::kI2: store<int8_t>(p, static_cast<int8_t>(wrap_narrow_int(t, v))); break;
    case DType::kU4:
    case DType::kU2: store<uint8_t>(p, static_cast<uint8_t>(wrap_narrow_int(t, v))); break;
    default: write_double(t, base, i, static_cast<double>(v)); break;
  }
}

}  // namespace

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<size_t>(numel_));
  if (dtype_ == DType::kF32) {
    if (numel_ > 0) std::memcpy(out.data(), data(), nbytes());  // an empty vector's data() may be null
    return out;
  }
  for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(read_double(dtype_, data(), i));
  return out;
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  read_doubles(0, out);
  return out;
}

std::vector<int64_t> Tensor::to_ints() const {
  std::vector<int64_t> out(static_cast<size_t>(numel_));
  read_ints(0, out);
  return out;
}

namespace {

void check_range(int64_t first, size_t count, int64_t numel) {
  check(first >= 0 && static_cast<int64_t>(count) <= numel - first, "elements ", first, " to ",
        first + static_cast<int64_t>(count), " of a tensor of ", numel);
}

}  // namespace

void Tensor::read_doubles(int64_t first, std::span<double> values) const {
  check_range(first, values.size(), numel_);
  const std::byte* base = data();
  if (dtype_ == DType::kF32) {
    const auto* in = reinterpret_cast<const float*>(base) + first;
    for (size_t i = 0; i < values.size(); ++i) values[i] = in[i];
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) values[i] = read_double(dtype_, base, first + static_cast<int64_t>(i));
}

void Tensor::read_ints(int64_t first, std::span<int64_t> values) const {
  check_range(first, values.size(), numel_);
  const std::byte* base = data();
  for (size_t i = 0; i < values.size(); ++i) values[i] = read_int(dtype_, base, first + static_cast<int64_t>(i));
}

void Tensor::write_doubles(int64_t first, std::span<const double> values) {
  check_range(first, values.size(), numel_);
  own();
  if (dtype_ == DType::kF32) {
    auto* out = reinterpret_cast<float*>(bytes_.data()) + first;
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i]);
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) write_double(dtype_, bytes_.data(), first + static_cast<int64_t>(i), values[i]);
}

void Tensor::write_ints(int64_t first, std::span<const int64_t> values) {
  check_range(first, values.size(), numel_);
  own();
  for (size_t i = 0; i < values.size(); ++i) write_int(dtype_, bytes_.data(), first + static_cast<int64_t>(i), values[i]);
}

void Tensor::set_floats(std::span<const float> values) {
  check(static_cast<int64_t>(values.size()) == numel_, "set_floats: ", values.size(),
        " values for a tensor of ", numel_, " elements");
  own();
  if (dtype_ == DType::kF32) {
    if (!bytes_.empty()) std::memcpy(bytes_.data(), values.data(), bytes_.size());  // data() may be null
    return;
  }
  for (int64_t i = 0; i < numel_; ++i) write_double(dtype_, bytes_.data(), i, values[i]);
}

void Tensor::set_doubles(std::span<const double> values) {
  check(static_cast<int64_t>(values.size()) == numel_, "set_doubles: ", values.size(),
        " values for a tensor of ", numel_, " elements");
  write_doubles(0, values);
}

void Tensor::set_ints(std::span<const int64_t> values) {
  check(static_cast<int64_t>(values.size()) == numel_, "set_ints: ", values.size(),
        " values for a tensor of ", numel_, " elements");
  write_ints(0, values);
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  check(checked_numel(shape, "reshape") == numel_, "reshape of ", shape_str(shape_), " to ",
        shape_str(shape), " changes the element count");
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::cast(DType to, NarrowCast how) const {
  Tensor out(to, shape_);
  // To an integer: truncate to int64 (saturating, NaN to 0), then wrap to the width, as numpy's
  // astype does for the values ONNX's tests use and as generated code does (codegen/scalar_ops.h).
  const bool int_path = !is_float(to) && to != DType::kBool;
  for (int64_t i = 0; i < numel_; ++i) {
    if (int_path) {
      write_int(to, out.bytes_.data(), i, read_int(dtype_, data(), i));
    } else if (is_narrow_float(to)) {
      const auto v = static_cast<float>(read_double(dtype_, data(), i));
      store<uint8_t>(out.bytes_.data() + i, float_to_narrow(to, v, how));
    } else {
      write_double(to, out.bytes_.data(), i, read_double(dtype_, data(), i));
    }
  }
  return out;
}

}  // namespace fusetune
