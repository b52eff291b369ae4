#pragma once
// An ONNX model of one node, built in memory and serialized as the ModelProto
// bytes ONNX Runtime's CreateSessionFromArray reads. The adapters need only
// this much of onnx.proto: one graph, one node, typed inputs and outputs, and
// int, float and string attributes; a writer of that much (protobuf's wire
// format: varints and length-delimited fields) is smaller than a dependency
// on libprotobuf and a compiled onnx.proto, which Debian does not package.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attncheck::impls::ort {

/// A node attribute: AttributeProto with one of f, i or s set.
struct OnnxAttribute {
  enum class Kind { kFloat, kInt, kString };
  std::string name;
  Kind kind = Kind::kInt;
  float f = 0;
  std::int64_t i = 0;
  std::string s;

  static OnnxAttribute of_int(std::string name, std::int64_t value);
  static OnnxAttribute of_float(std::string name, float value);
  static OnnxAttribute of_string(std::string name, std::string value);
};

/// One dimension of a graph input's or output's shape: dim_param when
/// `param` is not empty (a size fixed only when the model runs), dim_value
/// otherwise.
struct OnnxDim {
  std::int64_t value = 0;
  std::string param;
};

/// A graph input or output: ValueInfoProto with a tensor type. An empty
/// `dims` is a scalar (a shape of rank 0, written as an empty shape).
struct OnnxValueInfo {
  std::string name;
  int elem_type = 1;  ///< TensorProto.DataType: FLOAT 1, INT32 6, INT64 7, BOOL 9, FLOAT16 10
  std::vector<OnnxDim> dims;
};

/// The graph's one node. An empty string in `inputs` is an optional input
/// left out, as onnx.proto's NodeProto spells it.
struct OnnxNode {
  std::string op_type;
  std::string domain;  ///< "" for the ONNX operator set, "com.microsoft" for contrib ops
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<OnnxAttribute> attributes;
};

/// A model of one node.
struct OnnxModel {
  /// IR version 11 (ONNX 1.18) is the first with opset 23.
  std::int64_t ir_version = 11;
  /// (domain, version) pairs: opset 23 brings the ONNX Attention op;
  /// com.microsoft 1 the contrib ops MultiHeadAttention and
  /// GroupQueryAttention.
  std::vector<std::pair<std::string, std::int64_t>> opsets = {{"", 23}, {"com.microsoft", 1}};
  OnnxNode node;
  std::vector<OnnxValueInfo> inputs;
  std::vector<OnnxValueInfo> outputs;
};

/// The serialized ModelProto of `model`.
std::string serialize(const OnnxModel& model);

}  // namespace attncheck::impls::ort
