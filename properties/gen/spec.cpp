#include "properties/gen/spec.h"

#include <algorithm>

namespace attncheck::gen {

GenSpec spec_for(const ImplInfo& info, DType dtype) {
  GenSpec s;
  s.dtype = dtype;
  s.features = info.features;
  s.limits = info.limits;
  // Scores rounded to a 16-bit format before softmax, by an s_cast or by
  // a 16-bit accumulation (torch's bf16 matmuls): keep them within the
  // first-order analysis of that format, or most large-regime cases are
  // discarded as ill-conditioned.
  // By stage (SPEC 4.1): the q.k sums' format, and a declared softmax
  // format coarser than the stored scores', which reads them.
  const PrecisionTraits& pt = info.precision;
  DType storage = pt.s_cast_format();
  if (pt.softmax_accum && unit_roundoff(*pt.softmax_accum) > unit_roundoff(storage))
    storage = *pt.softmax_accum;
  if (storage != pt.score_format() || unit_roundoff(pt.score_format()) > unit_roundoff(DType::f32)) {
    s.score_storage = storage;
  }
  // Q rounded to Q8_0 before q.k (q_cast, SPEC 4.1) errs by up to half its
  // block's scale, max |q| / 254 per element: about bf16's unit roundoff
  // (2^-8) of the largest |q|, so scores keep to bf16's first-order range,
  // or most cases are discarded as ill-conditioned.
  for (const DTypeCombo& c : info.combos) {
    const std::optional<DType> q_cast = pt.q_cast_format(c.kv);
    if (q_cast && is_block_format(*q_cast) &&
        (!s.score_storage || unit_roundoff(*s.score_storage) < unit_roundoff(DType::bf16)))
      s.score_storage = DType::bf16;
  }
  for (const DTypeCombo& c : info.combos) {
    if (c.out == dtype) s.combos.push_back(c);
  }
  s.key_block = pt.key_block;
  for (const ImplPath& path : info.paths) s.key_block = std::max(s.key_block, path.precision.key_block);
  s.pv_range = max_finite(pt.pv_format());
  for (const ImplPath& path : info.paths)
    s.pv_range = std::min(s.pv_range, max_finite(path.precision.pv_format()));
  return s;
}

GenSpec spec_for(const ImplInfo& info, DType dtype, Profile profile) {
  GenSpec s = spec_for(info, dtype);
  if (profile == Profile::thorough) {  // past the usual block sizes of 4, 8 and 16
    s.max_t = 19;
    s.max_d = 9;
    s.max_bh = 4;
  }
  return s;
}

}  // namespace attncheck::gen
