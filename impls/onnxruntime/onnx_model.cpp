#include "impls/onnxruntime/onnx_model.h"

#include <cstring>

// Field numbers are onnx/onnx.proto's (proto2), quoted beside each use; the
// encoding is protobuf's wire format: a tag varint (field << 3 | wire type),
// then a varint (type 0), a little-endian 32-bit value (type 5), or a length
// varint and that many bytes (type 2) for strings and nested messages.

namespace attncheck::impls::ort {
namespace {

constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

// A message under construction: fields appended in any order (protobuf
// readers accept any), nested messages serialized first and added as bytes.
class Message {
 public:
  Message& varint(int field, std::uint64_t value) {
    tag(field, kVarint);
    raw_varint(value);
    return *this;
  }
  // int64 fields encode a negative value as its 64-bit two's complement.
  Message& int64(int field, std::int64_t value) {
    return varint(field, static_cast<std::uint64_t>(value));
  }
  Message& fixed32_float(int field, float value) {
    tag(field, kFixed32);
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int byte = 0; byte < 4; ++byte) out_.push_back(static_cast<char>(bits >> (8 * byte)));
    return *this;
  }
  Message& bytes(int field, const std::string& value) {
    tag(field, kLengthDelimited);
    raw_varint(value.size());
    out_ += value;
    return *this;
  }
  Message& message(int field, const Message& nested) { return bytes(field, nested.out_); }
  const std::string& str() const { return out_; }

 private:
  void tag(int field, int wire_type) {
    raw_varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire_type));
  }
  void raw_varint(std::uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  std::string out_;
};

// AttributeProto: name = 1, f = 2, i = 3, s = 4, type = 20 with
// AttributeType FLOAT = 1, INT = 2, STRING = 3.
Message attribute(const OnnxAttribute& a) {
  Message m;
  m.bytes(1, a.name);
  switch (a.kind) {
    case OnnxAttribute::Kind::kFloat:
      return m.fixed32_float(2, a.f).varint(20, 1);
    case OnnxAttribute::Kind::kInt:
      return m.int64(3, a.i).varint(20, 2);
    case OnnxAttribute::Kind::kString:
      return m.bytes(4, a.s).varint(20, 3);
  }
  return m;
}

// NodeProto: input = 1, output = 2, op_type = 4, attribute = 5, domain = 7.
Message node(const OnnxNode& n) {
  Message m;
  for (const std::string& input : n.inputs) m.bytes(1, input);
  for (const std::string& output : n.outputs) m.bytes(2, output);
  m.bytes(4, n.op_type);
  for (const OnnxAttribute& a : n.attributes) m.message(5, attribute(a));
  if (!n.domain.empty()) m.bytes(7, n.domain);
  return m;
}

// ValueInfoProto: name = 1, type = 2. TypeProto: tensor_type = 1.
// TypeProto.Tensor: elem_type = 1, shape = 2. TensorShapeProto: dim = 1.
// TensorShapeProto.Dimension: dim_value = 1, dim_param = 2.
Message value_info(const OnnxValueInfo& v) {
  Message shape;
  for (const OnnxDim& d : v.dims) {
    Message dim;
    if (d.param.empty()) {
      dim.int64(1, d.value);
    } else {
      dim.bytes(2, d.param);
    }
    shape.message(1, dim);
  }
  Message tensor;
  tensor.varint(1, static_cast<std::uint64_t>(v.elem_type)).message(2, shape);
  Message type;
  type.message(1, tensor);
  Message m;
  m.bytes(1, v.name).message(2, type);
  return m;
}

// GraphProto: node = 1, name = 2, input = 11, output = 12.
Message graph(const OnnxModel& model) {
  Message m;
  m.message(1, node(model.node)).bytes(2, "attncheck");
  for (const OnnxValueInfo& v : model.inputs) m.message(11, value_info(v));
  for (const OnnxValueInfo& v : model.outputs) m.message(12, value_info(v));
  return m;
}

}  // namespace

OnnxAttribute OnnxAttribute::of_int(std::string name, std::int64_t value) {
  OnnxAttribute a;
  a.name = std::move(name);
  a.kind = Kind::kInt;
  a.i = value;
  return a;
}

OnnxAttribute OnnxAttribute::of_float(std::string name, float value) {
  OnnxAttribute a;
  a.name = std::move(name);
  a.kind = Kind::kFloat;
  a.f = value;
  return a;
}

OnnxAttribute OnnxAttribute::of_string(std::string name, std::string value) {
  OnnxAttribute a;
  a.name = std::move(name);
  a.kind = Kind::kString;
  a.s = std::move(value);
  return a;
}

// ModelProto: ir_version = 1, producer_name = 2, graph = 7, opset_import = 8.
// OperatorSetIdProto: domain = 1, version = 2.
std::string serialize(const OnnxModel& model) {
  Message m;
  m.int64(1, model.ir_version).bytes(2, "attncheck");
  m.message(7, graph(model));
  for (const auto& [domain, version] : model.opsets) {
    Message opset;
    opset.bytes(1, domain).int64(2, version);
    m.message(8, opset);
  }
  return m.str();
}

}  // namespace attncheck::impls::ort
