#pragma once
// Both directions of the C ABI, for each of its versions: a descriptor read
// into the C++ model (ImplInfo), a Problem written into the C problem struct
// with its inputs in guarded buffers, and where the outputs are laid out.
// The ABI version is a template parameter: Abi<1> names the frozen structs
// of plugin_v1.h, Abi<2> those of plugin.h. Every version 1 field has the
// same name in both, so one body serves the two.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/implementation.h"
#include "host/plugin_loader.h"
#include "host/guarded_array.h"

namespace attncheck::host_detail {

/// The structs of ABI version `Version`.
template <uint32_t Version>
struct Abi;

template <>
struct Abi<1> {
  static constexpr uint32_t kVersion = ATTNCHECK_V1_ABI_VERSION;
  using Descriptor = attncheck_v1_impl;
  using CProblem = attncheck_v1_problem;
  using Outputs = attncheck_v1_outputs;
  using Grads = attncheck_v1_grads;
};

template <>
struct Abi<2> {
  static constexpr uint32_t kVersion = ATTNCHECK_ABI_VERSION;
  using Descriptor = attncheck_impl;
  using CProblem = attncheck_problem;
  using Outputs = attncheck_outputs;
  using Grads = attncheck_grads;
};
static_assert(Abi<2>::kVersion == 2, "plugin.h and this loader speak version 2");

/// The format combinations a descriptor declares: its combos when it lists
/// any (version 2), else one {d, d, d} per dtypes bit.
std::vector<DTypeCombo> declared_combos(const attncheck_impl& d);
std::vector<DTypeCombo> declared_combos(const attncheck_v1_impl& d);

/// The formats d with {d, d, d} among combos, as dtypes bits.
uint32_t uniform_dtypes(const std::vector<DTypeCombo>& combos);

/// Whether a version 2 descriptor's struct_size covers the appended field
/// at `offset` of `size` bytes (SPEC 5.1: an appended field is read only
/// where it does; the loader also zero-fills what a shorter descriptor
/// lacks). E.g. covers(d, offsetof(attncheck_impl, stages), sizeof d.stages).
inline bool covers(const attncheck_impl& d, size_t offset, size_t size) {
  return d.struct_size >= offset + size;
}

/// The paths of a version 2 descriptor (SPEC 4.1), each copied at the
/// stride of paths[0].struct_size into a zero-initialised attncheck_path,
/// so the fields a path built against an older header lacks read as zero.
/// Empty when struct_size does not cover paths, n_paths is 0 or paths is
/// NULL; also when paths[0].struct_size is outside kFirstPathSize ..
/// kMaxStructSize, which validation refuses first.
std::vector<attncheck_path> declared_paths(const attncheck_impl& d);

/// The precision a version 2 descriptor or one of its paths declares, read
/// the same way for both: precision, s_cast, ftz_formats and the stages
/// (a stage whose bit is clear stays unset, q_cast ATTNCHECK_Q_CAST_KV is
/// q_cast_kv). flush_to_zero without ftz_formats becomes the explicit bits
/// of every format it flushes (pv_accum's when pv_accum is declared).
PrecisionTraits declared_precision(const attncheck_impl& d);
PrecisionTraits declared_precision(const attncheck_path& p);
/// A version 1 descriptor's: S not cast, no stages.
PrecisionTraits declared_precision(const attncheck_v1_impl& d);

/// What a valid descriptor declares, as the harness's ImplInfo (kind
/// plugin, origin and description naming `origin`). A version 1 descriptor
/// is widened to the version 2 model: S is not cast (s_cast = accum),
/// flush_to_zero speaks for every format, and the dtypes bits are the
/// combinations {d, d, d}. A version 2 descriptor's paths become
/// ImplInfo::paths, each read as declared_precision reads the descriptor.
ImplInfo declared_info(const attncheck_impl& d, const std::string& origin);
ImplInfo declared_info(const attncheck_v1_impl& d, const std::string& origin);

/// Copies strides into a C ABI strides field.
void copy_strides(int64_t (&dst)[4], const Shape& src);

/// Where a forward pass writes: out as the harness holds it (shape and
/// strides of its GuardedArray, whose values() are then in out_index order)
/// and the strides the plugin is given (indexed b, h, i, d); lse's shape.
/// Dense queries: out [b][h][tq][dv] (in q's layout family for STRIDES
/// implementations), lse [b][h][tq]. Packed queries (SPEC 1.1): out packed
/// like q, [total_q][heads][dv] with out_strides {0, dv, heads * dv, 1} (or
/// q's layout family), and lse [heads][total_q].
struct OutputLayout {
  Shape out_shape, out_strides, abi_out_strides, lse_shape;
};
OutputLayout output_layout(const Problem& p, bool strided);

/// The C problem of p in ABI version `Version`, and the guarded buffers it
/// points into. A version 1 problem ends at softcap (its abi_version is 1);
/// a version 2 one carries the formats, descales, sink and sequence layout
/// of p. Instantiated for versions 1 and 2.
template <uint32_t Version>
struct MarshalledProblem {
  typename Abi<Version>::CProblem c{};
  std::vector<GuardedInput> inputs;

  /// Throws InputError when a value cannot be stored in its format.
  explicit MarshalledProblem(const Problem& p);

  /// Adds dout (backward) as one more guarded input; returns its data.
  const void* add_dout(const std::vector<unsigned char>& bytes, DType d);

  /// Throws PluginContractError when the plugin wrote into an input.
  void check_inputs(const std::string& who) const;

  /// Bytes the inputs hold.
  size_t bytes() const {
    size_t n = 0;
    for (const GuardedInput& g : inputs) n += g.bytes();
    return n;
  }
};

/// The message of a call that returned ATTNCHECK_ERROR: the plugin's
/// error[] of `capacity` bytes as one printable line.
std::string plugin_error_message(const char* error, size_t capacity);

/// The message of a return code that is none of OK, ERROR, UNSUPPORTED.
std::string bad_return_code(const std::string& who, const char* call, int code);

}  // namespace attncheck::host_detail
