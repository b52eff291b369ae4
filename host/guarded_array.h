#pragma once
// The buffers a plugin call reads and writes: values stored in the
// plugin's element format, each buffer between guard regions that show a
// write outside it, and outputs pre-filled with a sentinel that shows an
// element left unwritten.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck::host_detail {

/// A shape or strides, outermost axis first.
using Shape = std::array<int64_t, 4>;

/// Row-major strides of a dense tensor of shape s.
Shape contiguous(const Shape& s);

/// Bytes of one element of format d (8, 4, 2 or 1).
size_t element_size(DType d);

/// An input array in format d, element for element (gaps of a strided
/// tensor stay NaN); at least one element long. A value d cannot hold is
/// refused with InputError (check_storable), never rounded.
std::vector<unsigned char> encode(DType d, const std::vector<double>& values);

/// A K or V tensor in the block format d (SPEC 1.2), as ggml lays it out:
/// the values' 32-element chunks in order, each chunk the canonical block
/// (attncheck/dtype.h), so an element offset e (in elements, as the
/// strides count) lives in block e / 32. A chunk that is no block lies in a
/// gap of a strided layout (Problem::validate checked every logical block)
/// and is stored as a block of NaNs, as is the tail of a last partial
/// chunk: a plugin that reads there reads poison.
std::vector<unsigned char> encode_blocks(DType d, const std::vector<double>& values);

/// An output buffer of `shape` laid out by `strides`, surrounded by guard
/// regions of kPluginGuardElements elements; elements of the layout's gaps
/// count as guard too. Every logical element starts as a sentinel NaN, every
/// other one as a signalling NaN of another payload: computed NaNs carry
/// neither, so a NaN the plugin writes is not mistaken for "unwritten".
class GuardedArray {
 public:
  GuardedArray(std::string name, DType d, Shape shape, Shape strides);

  /// Element 0 of the logical tensor, as handed to the plugin.
  void* data() { return element(0); }
  const Shape& strides() const { return strides_; }

  /// Throws PluginContractError when an element outside the logical tensor
  /// changed; `who` names the implementation.
  void check_guards(const std::string& who) const;

  /// Throws PluginContractError when an element the plugin had to write
  /// still holds the sentinel.
  void check_written(const std::string& who) const;

  /// The logical elements as doubles, row-major.
  std::vector<double> values() const;

  /// Once the call has returned and been checked: remembers every byte, so
  /// that a write after the return (from a thread the plugin left running)
  /// is seen by check_frozen.
  void freeze() { frozen_ = storage_; }
  /// Bytes held (the buffer with its guards).
  size_t bytes() const { return storage_.size(); }

  /// Throws PluginContractError when a byte changed since freeze(); `who`
  /// names the implementation and when it wrote.
  void check_frozen(const std::string& who) const;

 private:
  unsigned char* element(int64_t e);
  const unsigned char* element(int64_t e) const;

  template <typename F>
  void for_each_index(F f) const {
    Shape idx{};
    for (idx[0] = 0; idx[0] < shape_[0]; ++idx[0])
      for (idx[1] = 0; idx[1] < shape_[1]; ++idx[1])
        for (idx[2] = 0; idx[2] < shape_[2]; ++idx[2])
          for (idx[3] = 0; idx[3] < shape_[3]; ++idx[3]) {
            f(idx[0] * strides_[0] + idx[1] * strides_[1] + idx[2] * strides_[2] +
                  idx[3] * strides_[3],
              idx);
          }
  }

  std::string name_;
  DType dtype_;
  size_t size_;
  Shape shape_, strides_;
  int64_t span_ = 0;
  std::vector<unsigned char> storage_;
  std::vector<uint8_t> logical_;
  std::vector<unsigned char> frozen_;
};

/// A read-only input handed to a plugin: its bytes between guard regions
/// of kPluginGuardElements elements each, and a copy of the whole to check
/// after the call that the plugin wrote neither into the input nor past it.
class GuardedInput {
 public:
  GuardedInput(std::string name, const void* data, size_t bytes, size_t element);

  void* data() { return storage_.data() + guard_; }

  /// Throws PluginContractError when any byte of the input or its guards
  /// changed.
  void check(const std::string& who) const;
  /// Bytes held (the input with its guards, and their pristine copy).
  size_t bytes() const { return storage_.size() + pristine_.size(); }

 private:
  std::string name_;
  size_t element_, guard_, size_;
  std::vector<unsigned char> storage_, pristine_;
};

}  // namespace attncheck::host_detail
