#include "importer/onnx_io.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/files.h"

namespace fusetune::importer {

namespace fs = std::filesystem;

namespace {

// External data of at least this size is mapped rather than read (a weight matrix, not a bias).
constexpr size_t kMapExternalBytes = size_t{1} << 20;

std::string tensor_label(const onnx::TensorProto& t) {
  return t.name().empty() ? std::string("tensor") : "tensor '" + t.name() + "'";
}

template <typename Src>
std::vector<std::byte> pack(const Src& field, DType dtype, int64_t count, const std::string& label) {
  check(static_cast<int64_t>(field.size()) == count, label, ": holds ", field.size(), " values, its shape needs ", count);
  Tensor t(dtype, {count});
  if (is_float(dtype) && dtype != DType::kF16 && dtype != DType::kBF16) {
    std::vector<double> v(field.begin(), field.end());
    t.set_doubles(v);
  } else {
    std::vector<int64_t> v;
    v.reserve(static_cast<size_t>(count));
    for (auto x : field) v.push_back(static_cast<int64_t>(x));
    t.set_ints(v);
  }
  return {t.data(), t.data() + t.nbytes()};
}

// External data's bytes: read into memory, or (`map`: a large tensor whose bytes are laid out as
// in memory, at an offset aligned for any element type) left in the file, mapped, and read only
// where they are used.
struct External {
  std::vector<std::byte> bytes;
  std::shared_ptr<const std::byte> mapped;
};

External read_external(const onnx::TensorProto& t, const fs::path& base_dir, size_t expected, bool map,
                       const std::string& label) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") location = e.value();
    try {
      if (e.key() == "offset") offset = std::stoll(e.value());
      if (e.key() == "length") length = std::stoll(e.value());
    } catch (const std::exception&) {
      fail(label, ": external_data ", e.key(), " '", e.value(), "' is not a number");
    }
  }
  check(!location.empty(), label, ": external data without a location");
  const fs::path rel(location);
  check(rel.is_relative() && rel.lexically_normal().string().rfind("..", 0) != 0, label, ": external data location '",
        location, "' leaves the model's directory");
  const fs::path path = base_dir / rel;
  std::error_code ec;
  check(fs::is_regular_file(path, ec), label, ": external data file '", path.string(), "' is missing");
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  if (length < 0) length = size - offset;
  check(offset >= 0 && length >= 0 && offset <= size && length <= size - offset, label, ": external data range ",
        offset, "+", length, " lies outside '", path.string(), "' (", size, " bytes)");
  check(static_cast<size_t>(length) == expected, label, ": external data holds ", length, " bytes, its shape needs ",
        expected);
  if (map && expected >= kMapExternalBytes && offset % 64 == 0) {
    const MappedFile file = map_file(path, "external data file");
    return {{}, std::shared_ptr<const std::byte>(file.bytes, file.bytes.get() + offset)};
  }
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::vector<std::byte> bytes(expected);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(expected));
  check(in.good() || expected == 0, label, ": reading external data from '", path.string(), "' failed");
  return {std::move(bytes), nullptr};
}

}  // namespace

size_t packed_size(DType dtype, int64_t count) {
  return (static_cast<size_t>(count) * static_cast<size_t>(dtype_bits(dtype)) + 7) / 8;
}

std::vector<std::byte> unpack_elements(DType dtype, const std::vector<std::byte>& packed, int64_t count) {
  const int bits = dtype_bits(dtype);
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  const bool sign_extend = dtype == DType::kI4 || dtype == DType::kI2;
  std::vector<std::byte> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const unsigned field = (std::to_integer<unsigned>(packed[static_cast<size_t>(i / per_byte)]) >> (bits * (i % per_byte))) & mask;
    const unsigned sign = 1u << (bits - 1);
    out[static_cast<size_t>(i)] = std::byte(static_cast<uint8_t>(sign_extend ? (field ^ sign) - sign : field));
  }
  return out;
}

std::vector<std::byte> pack_elements(const Tensor& t) {
  const int bits = dtype_bits(t.dtype());
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  std::vector<std::byte> out(packed_size(t.dtype(), t.numel()), std::byte{0});
  for (int64_t i = 0; i < t.numel(); ++i) {
    const unsigned field = std::to_integer<unsigned>(t.data()[i]) & mask;
    out[static_cast<size_t>(i / per_byte)] |= std::byte(static_cast<uint8_t>(field << (bits * (i % per_byte))));
  }
  return out;
}

onnx::ModelProto read_model(const fs::path& path) {
  std::error_code ec;
  check(fs::is_regular_file(path, ec), path.string(), ": model file not found (or not a regular file)");
  // Parsed from the file mapped, not from a copy: a model's inline weights are copied once, into
  // the message.
  const MappedFile file = map_file(path, "model file");
  return parse_model(std::string_view(reinterpret_cast<const char*>(file.bytes.get()), file.size), path.string());
}

onnx::ModelProto parse_model(std::string_view bytes, const std::string& label) {
  check(!bytes.empty(), label, ": empty file, not an ONNX model");
  onnx::ModelProto model;
  check(model.ParseFromArray(bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX))) &&
            bytes.size() <= INT32_MAX,
        label, ": not an ONNX model (protobuf parsing failed: truncated or not ONNX)");
  check(model.has_graph(), label, ": not an ONNX model (no graph)");
  check(model.ir_version() >= 3, label, ": ONNX IR version ", model.ir_version(),
        " is unsupported (fusetune reads IR 3 and later)");
  return model;
}

// The kind of a value of type t, for messages ("a sequence", "a map", ...; "sequences", "maps"
// with `plural`).
static std::string kind_name(const onnx::TypeProto& t, bool plural = false) {
  const char* kind = t.has_tensor_type()          ? "tensor"
                     : t.has_sequence_type()      ? "sequence"
                     : t.has_map_type()           ? "map"
                     : t.has_optional_type()      ? "optional value"
                     : t.has_sparse_tensor_type() ? "sparse tensor"
                     : t.has_opaque_type()        ? "opaque value"
                                                  : nullptr;
  if (kind == nullptr) return plural ? "values of no declared type" : "of no declared type";
  if (plural) return std::string(kind) + "s";
  return std::string(std::strchr("aeiou", kind[0]) ? "an " : "a ") + kind;
}

void require_tensor(const onnx::ValueInfoProto& vi, const char* what) {
  check(vi.type().has_tensor_type(), what, " '", vi.name(), "' is ", kind_name(vi.type()), ", not a tensor: fusetune compiles tensor values only");
}

std::string element_name(const std::string& sequence, int64_t index) { return sequence + "[" + std::to_string(index) + "]"; }

void require_graph_value(const onnx::ValueInfoProto& vi, const char* what) {
  const onnx::TypeProto* t = &vi.type();
  std::string held;  // "an optional of ", "a sequence of ", or both
  if (t->has_optional_type()) {
    t = &t->optional_type().elem_type();
    held = "an optional of ";
  }
  if (t->has_sequence_type()) {
    t = &t->sequence_type().elem_type();
    held += "a sequence of ";
  }
  check(t->has_tensor_type(), what, " '", vi.name(), "' is ", held.empty() ? kind_name(*t) : held + kind_name(*t, true),
        ": fusetune takes and gives tensors, sequences of tensors and optionals of them");
}

bool is_default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

int64_t default_opset(const onnx::ModelProto& model) {
  int64_t opset = 0;
  for (const auto& o : model.opset_import()) {
    if (is_default_domain(o.domain())) opset = o.version();
  }
  return opset;
}

std::string onnx_type_name(int code) {
  static const char* const names[] = {"UNDEFINED",    "FLOAT",         "UINT8",       "INT8",       "UINT16",
                                      "INT16",        "INT32",         "INT64",       "STRING",     "BOOL",
                                      "FLOAT16",      "DOUBLE",        "UINT32",      "UINT64",     "COMPLEX64",
                                      "COMPLEX128",   "BFLOAT16",      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                      "FLOAT8E5M2FNUZ", "UINT4",       "INT4",        "FLOAT4E2M1", "FLOAT8E8M0",
                                      "UINT2",        "INT2"};
  if (code >= 0 && static_cast<size_t>(code) < std::size(names)) return std::string(names[code]) + " (" + std::to_string(code) + ")";
  return "code " + std::to_string(code);
}

Tensor decode_tensor(const onnx::TensorProto& t, const fs::path& base_dir) {
  const std::string label = tensor_label(t);
  const DType dtype = dtype_from_onnx(t.data_type());
  check(dtype != DType::kUndefined, label, ": data type ", onnx_type_name(t.data_type()),
        " is not supported (fusetune's are floats of 8 to 64 bits, float4, integers of 2 to 64 bits and bool)");
  Shape shape(t.dims().begin(), t.dims().end());
  const int64_t count = checked_numel(shape, label);
  const size_t nbytes = static_cast<size_t>(count) * dtype_size(dtype);
  const size_t file_bytes = packed_size(dtype, count);
  std::vector<std::byte> bytes;
  if (t.data_location() == 1) {
    External e = read_external(t, base_dir, file_bytes, file_bytes == nbytes, label);
    if (e.mapped) return Tensor::mapped(dtype, std::move(shape), std::move(e.mapped));
    bytes = std::move(e.bytes);
  } else if (t.has_raw_data()) {
    check(t.raw_data().size() == file_bytes, label, ": raw_data holds ", t.raw_data().size(), " bytes, shape ",
          shape_str(shape), " of ", dtype_name(dtype), " needs ", file_bytes);
    const auto* raw = reinterpret_cast<const std::byte*>(t.raw_data().data());
    bytes.assign(raw, raw + file_bytes);  // not memcpy: an empty vector's data() may be null
  } else if (dtype == DType::kF16 || dtype == DType::kBF16 || is_narrow_float(dtype) || dtype_bits(dtype) < 8) {
    // int32_data holds 16-bit patterns (float16, bfloat16), codes (float8) or packed bytes
    // (float4, 4- and 2-bit integers), as the file's raw bytes would be
    const size_t width = dtype_size(dtype) == 2 ? 2 : 1;
    check(t.int32_data().size() * width == file_bytes, label, ": int32_data holds ", t.int32_data().size(),
          " values, shape ", shape_str(shape), " of ", dtype_name(dtype), " needs ", file_bytes / width);
    bytes.resize(file_bytes);
    for (size_t i = 0; i < file_bytes / width; ++i) {
      const auto bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
      std::memcpy(bytes.data() + width * i, &bits, width);  // little-endian: the low byte(s)
    }
  } else {
    switch (dtype) {
      case DType::kF32: bytes = pack(t.float_data(), dtype, count, label); break;
      case DType::kF64: bytes = pack(t.double_data(), dtype, count, label); break;
      case DType::kI64: bytes = pack(t.int64_data(), dtype, count, label); break;
      case DType::kU32:
      case DType::kU64: bytes = pack(t.uint64_data(), dtype, count, label); break;
      default: bytes = pack(t.int32_data(), dtype, count, label); break;
    }
  }
  if (file_bytes != nbytes) bytes = unpack_elements(dtype, bytes, count);
  return Tensor::from_bytes(dtype, std::move(shape), std::move(bytes));
}

NamedTensor read_tensor_file(const fs::path& path) {
  const std::string bytes = read_file(path, "tensor file");
  onnx::TensorProto proto;
  check(proto.ParseFromString(bytes), path.string(), ": not a TensorProto file");
  try {
    return {proto.name(), decode_tensor(proto, path.parent_path())};
  } catch (const Error& e) {
    fail(path.string(), ": ", e.what());
  }
}

ValueFile read_value_file(const fs::path& path, const onnx::TypeProto& type, const std::string& name) {
  constexpr int kOnnxTensor = 1;  // SequenceProto's and OptionalProto's elem_type of a tensor
  ValueFile v;
  if (type.has_tensor_type()) {
    NamedTensor t = read_tensor_file(path);
    v.name = t.name.empty() ? name : t.name;
    t.name = v.name;
    v.tensors.push_back(std::move(t));
    return v;
  }
  const std::string bytes = read_file(path, "test-data file");
  const auto decode = [&](const onnx::TensorProto& t) {
    try {
      return decode_tensor(t, path.parent_path());
    } catch (const Error& e) {
      fail(path.string(), ": ", e.what());
    }
  };
  const auto sequence = [&](const onnx::SequenceProto& s) {
    check(s.elem_type() == kOnnxTensor || s.tensor_values_size() == 0, path.string(), ": the sequence '", v.name, "' holds element type ",
          s.elem_type(), ", not tensors: fusetune takes sequences of tensors");
    v.sequence = true;
    for (int i = 0; i < s.tensor_values_size(); ++i) v.tensors.push_back({element_name(v.name, i), decode(s.tensor_values(i))});
  };
  if (type.has_sequence_type()) {
    onnx::SequenceProto s;
    check(s.ParseFromString(bytes), path.string(), ": not a SequenceProto file (the model's '", name, "' is a sequence)");
    v.name = s.name().empty() ? name : s.name();
    sequence(s);
    return v;
  }
  check(type.has_optional_type(), path.string(), ": '", name, "' is neither a tensor, a sequence nor an optional");
  onnx::OptionalProto o;
  check(o.ParseFromString(bytes), path.string(), ": not an OptionalProto file (the model's '", name, "' is an optional)");
  v.name = o.name().empty() ? name : o.name();
  if (o.has_tensor_value()) {
    v.tensors.push_back({v.name, decode(o.tensor_value())});
  } else if (o.has_sequence_value()) {
    sequence(o.sequence_value());
  } else {
    check(o.elem_type() == 0, path.string(), ": the optional '", v.name, "' holds element type ", o.elem_type(),
          ", not a tensor or a sequence of tensors");
    v.empty_optional = true;
  }
  return v;
}

void write_tensor_file(const fs::path& path, const std::string& name, const Tensor& t) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(dtype_to_onnx(t.dtype()));
  for (int64_t d : t.shape()) proto.add_dims(d);
  if (dtype_bits(t.dtype()) < 8) {
    const std::vector<std::byte> packed = pack_elements(t);
    proto.set_raw_data(reinterpret_cast<const char*>(packed.data()), packed.size());
  } else {
    proto.set_raw_data(reinterpret_cast<const char*>(t.data()), t.nbytes());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(out.good(), path.string(), ": cannot write");
  check(proto.SerializeToOstream(&out), path.string(), ": writing failed");
}

}  // namespace fusetune::importer
