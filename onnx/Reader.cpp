// Reading ONNX files: TensorProto -> rt::Tensor (inline and external data) and the test data's
// tensor files. The model itself is parsed in Import.cpp.
#include "onnx/Importer.h"

#include "runtime/Numeric.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tsr::onnxio {

std::string ImportError::str() const {
  std::string s = file + ": ";
  if (!opType.empty()) {
    s += "node " + (node.empty() ? std::string("(unnamed)") : "`" + node + "`") + " (" + opType;
    if (opset) s += ", opset " + std::to_string(opset);
    s += "): ";
  } else if (opset) {
    s += "(opset " + std::to_string(opset) + "): ";
  }
  return s + message;
}

DType dtypeOfElem(int32_t e) {
  using T = onnx::TensorProto;
  switch (e) {
  case T::FLOAT: return DType::F32;
  case T::DOUBLE: return DType::F64;
  case T::FLOAT16: return DType::F16;
  case T::BFLOAT16: return DType::BF16;
  case T::INT8: return DType::I8;
  case T::INT32: return DType::I32;
  case T::INT64: return DType::I64;
  case T::BOOL: return DType::Bool;
  default: break;
  }
  const char *name = T::DataType_IsValid(e) ? T::DataType_Name(T::DataType(e)).c_str() : "unknown";
  throw Unsupported("the element type " + std::string(name) + " has no Tessera dtype (supported: float, double, "
                    "float16, bfloat16, int8, int32, int64, bool)");
}

namespace {

std::string readBytes(const std::string &path, int64_t offset, int64_t length) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw BadModel("the external data file `" + path + "` is not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw BadModel("cannot open the external data file `" + path + "`");
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (offset < 0 || offset > size) throw BadModel("the external data file `" + path + "` is shorter than the offset " + std::to_string(offset));
  if (length < 0) length = size - offset;
  if (offset + length > size)
    throw BadModel("the external data file `" + path + "` has " + std::to_string(size - offset) + " bytes after offset " +
                   std::to_string(offset) + ", not " + std::to_string(length));
  std::string out(size_t(length), '\0');
  f.seekg(offset);
  f.read(out.data(), length);
  return out;
}

} // namespace

rt::Tensor tensorOfProto(const onnx::TensorProto &t, const std::string &baseDir) {
  const DType dt = dtypeOfElem(t.data_type());
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0) throw BadModel("tensor `" + t.name() + "` has a negative dim");
  if (t.has_segment()) throw Unsupported("tensor `" + t.name() + "` is segmented");
  // The element count from the dims, checked against the data the tensor holds before anything is
  // allocated: a damaged file's dims may ask for any size.
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d && n > (int64_t(1) << 40) / d) throw BadModel("tensor `" + t.name() + "` has more than 2^40 elements");
    n *= d;
  }
  std::string external;
  const std::string *raw = t.has_raw_data() ? &t.raw_data() : nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (auto &kv : t.external_data()) {
      try {
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = std::stoll(kv.value());
        else if (kv.key() == "length") length = std::stoll(kv.value());
      } catch (const std::exception &) {
        throw BadModel("tensor `" + t.name() + "` has an external-data " + kv.key() + " that is not a number");
      }
    }
    if (location.empty()) throw BadModel("tensor `" + t.name() + "` is external data without a location");
    std::filesystem::path p(location);
    if (p.is_absolute() || location.find("..") != std::string::npos)
      throw BadModel("tensor `" + t.name() + "`: external data must lie beside the model, not at `" + location + "`");
    try {
      external = readBytes((std::filesystem::path(baseDir) / p).string(), offset, length);
    } catch (const BadModel &e) {
      throw BadModel("tensor `" + t.name() + "`: " + e.what());
    }
    raw = &external;
  }
  if (raw) {
    if (int64_t(raw->size()) != n * int64_t(rt::dtypeSize(dt)))
      throw BadModel("tensor `" + t.name() + "` holds " + std::to_string(raw->size()) + " bytes for " + std::to_string(n) +
                     " elements of " + std::string(dtypeName(dt)));
    rt::Tensor out = rt::Tensor::empty(shape, dt);
    if (n) std::memcpy(out.data(), raw->data(), raw->size());
    return out;
  }
  auto need = [&](int64_t have) {
    if (have != n)
      throw BadModel("tensor `" + t.name() + "` holds " + std::to_string(have) + " values for " + std::to_string(n) + " elements");
  };
  const int64_t held = dt == DType::F32 ? t.float_data_size() : dt == DType::F64 ? t.double_data_size() : dt == DType::I64 ? t.int64_data_size()
                                                                                                             : t.int32_data_size();
  need(held);
  rt::Tensor out = rt::Tensor::empty(shape, dt);
  switch (dt) {
  case DType::F32: for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = t.float_data(int(i)); break;
  case DType::F64: for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = t.double_data(int(i)); break;
  case DType::I64: for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = t.int64_data(int(i)); break;
  case DType::F16: case DType::BF16:
    for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = uint16_t(t.int32_data(int(i)));
    break;
  default: // int8, int32, bool: int32_data
    for (int64_t i = 0; i < n; ++i) out.fromI64(i, t.int32_data(int(i)));
    break;
  }
  return out;
}

namespace {

/// The TensorProto serialized in the file at `path`, or why it cannot be read.
std::variant<onnx::TensorProto, TensorReadError> readProtoFile(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    return TensorReadError{"`" + path + "` is not a regular file"};
  std::ifstream f(path, std::ios::binary);
  if (!f) return TensorReadError{"cannot open `" + path + "`"};
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::TensorProto t;
  if (!t.ParseFromString(ss.str())) return TensorReadError{"`" + path + "` is not a serialized ONNX TensorProto"};
  return t;
}

} // namespace

std::variant<rt::Tensor, TensorReadError> readTensorFile(const std::string &path) {
  auto read = readProtoFile(path);
  if (auto *e = std::get_if<TensorReadError>(&read)) return *e;
  const onnx::TensorProto &t = std::get<onnx::TensorProto>(read);
  try {
    return tensorOfProto(t, std::filesystem::path(path).parent_path().string());
  } catch (const Unsupported &e) {
    return TensorReadError{e.what(), true};
  } catch (const std::exception &e) {
    return TensorReadError{e.what()};
  }
}

std::variant<StringTensor, TensorReadError> readStringTensorFile(const std::string &path) {
  auto read = readProtoFile(path);
  if (auto *e = std::get_if<TensorReadError>(&read)) return *e;
  const onnx::TensorProto &t = std::get<onnx::TensorProto>(read);
  if (t.data_type() != onnx::TensorProto::STRING) return TensorReadError{"`" + path + "` is not a tensor of strings"};
  StringTensor out;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return TensorReadError{"`" + path + "` has a negative dim"};
    out.shape.push_back(d);
    if (d && n > (int64_t(1) << 40) / d) return TensorReadError{"`" + path + "` is too large"};
    n *= d;
  }
  if (t.string_data_size() != n)
    return TensorReadError{"`" + path + "` holds " + std::to_string(t.string_data_size()) + " strings for " + std::to_string(n) + " elements"};
  out.data.assign(t.string_data().begin(), t.string_data().end());
  return out;
}

} // namespace tsr::onnxio
