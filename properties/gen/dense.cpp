#include "properties/gen/dense.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/dtype.h"
#include "core/broadcast.h"
#include "properties/gen/coverage.h"
#include "properties/gen/draws.h"
#include "properties/gen/empty_rows.h"
#include "properties/gen/layouts.h"
#include "properties/gen/real_size_draw.h"
#include "properties/gen/value_regimes.h"

namespace attncheck::gen::detail {
namespace {

using rc::gen::inRange;

std::vector<int64_t> allowed_dims(int64_t lo, int64_t hi, int64_t multiple) {
  std::vector<int64_t> dims;
  for (int64_t d = std::max<int64_t>(1, lo); d <= hi; ++d) {
    if (multiple <= 0 || d % multiple == 0) dims.push_back(d);
  }
  if (dims.empty()) dims.push_back(multiple > 0 ? std::max(lo, multiple) : std::max<int64_t>(1, lo));
  return dims;
}

int64_t limited(int64_t max_value, int64_t limit) {
  return limit > 0 ? std::min(max_value, limit) : max_value;
}

// A mask or bias of p's scores broadcast over batch, heads, both or
// neither (drawn), each element from draw().
template <typename T, typename Draw>
Broadcast<T> broadcast(const Problem& p, Draw draw) {
  const int64_t batch = coin() ? p.batch : 1;
  const int64_t heads = coin() ? p.heads : 1;
  return make_broadcast<T>(batch, heads, p.tq, p.tk, [&](auto...) { return draw(); });
}

struct Dims {
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
};

struct Structure {
  bool causal = false, window = false;
  Align align = Align::top_left;
  int64_t left = -1, right = -1;
};

bool has(Features f, Features bit) { return (f & bit) != 0; }

// The dims as one part: batch up to max_batch, heads, K/V heads (a divisor
// of heads where GQA is declared), tq, tk, dk and dv within the limits.
Dims draw_dims(const GenSpec& spec, int64_t max_batch) {
  return part([spec, max_batch] {
    const Features f = spec.features;
    const Limits& lim = spec.limits;
    Dims d{};
    d.batch = *inRange<int64_t>(1, max_batch + 1);
    if (lim.max_batch_heads > 0) d.batch = std::min(d.batch, lim.max_batch_heads);
    d.heads = *inRange<int64_t>(1, spec.max_bh + 1);
    if (lim.max_batch_heads > 0) d.heads = std::max<int64_t>(1, std::min(d.heads, lim.max_batch_heads / d.batch));
    if (spec.require_gqa) d.heads = std::max<int64_t>(d.heads, 2);
    d.kv_heads = d.heads;
    if (has(f, ATTNCHECK_FEATURE_GQA)) {
      std::vector<int64_t> divisors;  // heads first: plain MHA is the simplest
      for (int64_t k = spec.require_gqa ? d.heads / 2 : d.heads; k >= 1; --k)
        if (d.heads % k == 0) divisors.push_back(k);
      d.kv_heads = divisors[static_cast<size_t>(pick(static_cast<int64_t>(divisors.size())))];
    }
    d.tq = *inRange<int64_t>(1, limited(spec.max_t, lim.max_tq) + 1);
    const int64_t tk_max = limited(spec.max_t, lim.max_tk);
    d.tk = *inRange<int64_t>(1, tk_max + 1);
    // A declared key block the small sizes never pass (GenSpec::key_block):
    // one draw in eight crosses it, at any case size; the choice shrinks
    // back to the small sizes.
    if (const int64_t cross = limited(2 * spec.key_block + 1, lim.max_tk);
        spec.key_block > 0 && cross > tk_max && cross > spec.key_block && pick(8) == 7) {
      d.tk = spec.key_block + 1 + pick(cross - spec.key_block);
    }
    const auto dks = allowed_dims(lim.dk_min, limited(spec.max_d, lim.dk_max), lim.dk_multiple);
    d.dk = dks[static_cast<size_t>(grow(static_cast<int64_t>(dks.size())))];
    d.dv = lim.dv_equals_dk ? d.dk : *inRange<int64_t>(1, spec.max_d + 1);
    return d;
  });
}

// Causal, window and alignment as one part, where the features allow them.
Structure draw_structure(const GenSpec& spec, int64_t tk) {
  return part([spec, tk] {
    const Features f = spec.features;
    std::vector<Align> aligns;
    if (has(f, ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)) aligns.push_back(Align::top_left);
    if (has(f, ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) aligns.push_back(Align::bottom_right);
    if (aligns.empty()) aligns.push_back(Align::top_left);
    Structure s;
    s.causal = has(f, ATTNCHECK_FEATURE_CAUSAL) && (spec.require_causal || coin());
    s.window = has(f, ATTNCHECK_FEATURE_WINDOW) && (spec.require_window || coin());
    s.align = (s.causal || s.window)
                  ? aligns[static_cast<size_t>(pick(static_cast<int64_t>(aligns.size())))]
                  : aligns.front();
    if (s.window) {
      s.left = pick(tk + 1) - 1;
      s.right = pick(tk + 1) - 1;
    }
    return s;
  });
}

// Key padding, mask, bias, softcap and scale, each where declared; the
// first three as one part each.
void draw_constraints(Problem& p, const GenSpec& spec) {
  const Features f = spec.features;
  p.key_valid = part([f, size = p.batch * p.tk] {
    std::vector<uint8_t> kv;
    if (has(f, ATTNCHECK_FEATURE_KEY_VALID) && coin()) {
      kv.resize(static_cast<size_t>(size));
      for (uint8_t& x : kv) x = mostly_allowed();
    }
    return kv;
  });
  p.mask = part([f, shape = p] () -> std::optional<Broadcast<uint8_t>> {
    if (!has(f, ATTNCHECK_FEATURE_MASK) || !coin()) return std::nullopt;
    return broadcast<uint8_t>(shape, mostly_allowed);
  });
  p.bias = part([f, shape = p, dtype = spec.dtype]() -> std::optional<Broadcast<double>> {
    if (!has(f, ATTNCHECK_FEATURE_BIAS) || !coin()) return std::nullopt;
    return broadcast<double>(shape, [dtype] { return round_to(dtype, std::ldexp(small_int(16), -3)); });
  });
  if (has(f, ATTNCHECK_FEATURE_SOFTCAP)) {
    const double caps[] = {0.0, 1.0, 5.0, 30.0};
    p.softcap = caps[pick(4)];
  }
  if (has(f, ATTNCHECK_FEATURE_SCALE)) {
    const double scales[] = {p.scale, 1.0, 0.5, 0.125, 2.0};
    p.scale = scales[pick(5)];
  }
}

// q, k and v of dims n in `layout`, each tensor one part from one regime
// (block K/V as exact blocks), within the safe limits of their formats.
void draw_tensors(Problem& p, const GenSpec& spec, DTypeCombo formats, const Dims& n,
                  Layout layout) {
  const bool blocks = is_block_format(formats.kv);
  // Safe limits: |s| <= dk (3 2^e)^2 stays 4x below 0.01 / u (SPEC 4's
  // first-order limit) for q and k; tk values of 3 2^e sum below the
  // largest finite value for v.
  // Scores stored in a coarser format (s_cast) err by 3 u_s |s| (SPEC 4):
  // the same limit with u_s, and the large regime (scores up to ~1e5, made
  // for float scores) capped by it too.
  const double u_scores = std::max(unit_roundoff(spec.dtype),
                                   spec.score_storage ? unit_roundoff(*spec.score_storage) : 0.0);
  const double first_order = std::log2(0.01 / u_scores);
  const int qk_huge = static_cast<int>(std::floor(
      (first_order - 2 - std::log2(9.0 * static_cast<double>(n.dk))) / 2));
  const int qk_large = spec.score_storage ? qk_huge : 6;
  // Input formats narrower than the output's (fp8) cap the large regime at
  // what they hold: small integers up to 3 times 2^e stay below their
  // largest finite value (448 for E4M3: e <= 6); values() caps the huge
  // one the same way, and its fp8 edges reach the format's top.
  const auto fits = [](DType d, int e) { return std::min(e, std::ilogb(max_finite(d)) - 2); };
  const int v_huge = std::ilogb(max_finite(spec.dtype)) - 3 - std::ilogb(static_cast<double>(n.tk));
  const auto tensor = [](int64_t size, DType dtype, int huge, int large) {
    return part([=] { return values(size, dtype, huge, large); });
  };
  p.q = lay_out(tensor(n.batch * n.heads * n.tq * n.dk, formats.q, qk_huge,
                       fits(formats.q, qk_large)),
                {n.batch, n.heads, n.tq, n.dk}, layout);
  if (blocks) {
    const auto block_tensor = [&](int64_t size, int huge) {
      return part([=, d = formats.kv] { return block_values(size, d, 3 * std::ldexp(1.0, huge)); });
    };
    p.k = lay_out(block_tensor(n.batch * n.kv_heads * n.tk * n.dk, qk_huge),
                  {n.batch, n.kv_heads, n.tk, n.dk}, layout, kBlockValues);
    p.v = lay_out(block_tensor(n.batch * n.kv_heads * n.tk * n.dv, v_huge),
                  {n.batch, n.kv_heads, n.tk, n.dv}, layout, kBlockValues);
  } else {
    p.k = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dk, formats.kv, qk_huge,
                         fits(formats.kv, qk_large)),
                  {n.batch, n.kv_heads, n.tk, n.dk}, layout);
    p.v = lay_out(tensor(n.batch * n.kv_heads * n.tk * n.dv, formats.kv, v_huge,
                         fits(formats.kv, 6)),
                  {n.batch, n.kv_heads, n.tk, n.dv}, layout);
  }
}

// A coverage target (coverage.h, "target NAME" / "reached NAME"): counted
// for a problem whose spec could reach it, reached when it did.
void target(const char* name, bool applies, bool reached) {
  if (!applies) return;
  count(std::string("target ") + name);
  if (reached) count(std::string("reached ") + name);
}

void count_dense(const Problem& p, const Structure& st, const Dims& n, Layout layout,
                 const GenSpec& spec) {
  Coverage* c = counting();
  if (!c) return;
  ++c->problems;
  const int64_t key_block = spec.key_block;
  // What a property's cases must reach, where the implementation declares
  // it (SPEC 3): a row past the key block (GenSpec::key_block), a GQA
  // group of more than one query head, causal in each declared alignment.
  const bool crosses = key_block > 0 && limited(2 * key_block + 1, spec.limits.max_tk) > key_block;
  target("a tk above the key block", crosses, n.tk > key_block);
  target("a GQA group above 1", has(spec.features, ATTNCHECK_FEATURE_GQA) && spec.max_bh >= 2,
         n.kv_heads != n.heads);
  const bool both = has(spec.features, ATTNCHECK_FEATURE_CAUSAL) &&
                    has(spec.features, ATTNCHECK_FEATURE_ALIGN_TOP_LEFT) &&
                    has(spec.features, ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT);
  target("causal top-left", both, st.causal && st.align == Align::top_left);
  target("causal bottom-right", both, st.causal && st.align == Align::bottom_right);
  if (!st.causal && !st.window && p.key_valid.empty() && !p.mask) count("constraints none");
  if (!p.key_valid.empty()) count("constraints key_padding");
  if (p.mask) count("constraints mask");
  if (st.causal) {
    count(st.align == Align::top_left ? "constraints causal_top_left"
                                      : "constraints causal_bottom_right");
  }
  if (st.window) count("constraints window");
  if (p.bias) count("bias");
  if (p.softcap > 0) count("softcap");
  if (layout != Layout::contiguous) count("strided");
  if (n.kv_heads != n.heads) count("gqa");
  if (n.tq != n.tk) count("tq != tk");
  if (key_block > 0 && n.tk > key_block) count("tk above key_block");
  if (n.tq == 1) count("tq = 1");
  if (n.batch != n.heads) count("batch != heads");
}

}  // namespace

Problem draw_dense(const GenSpec& spec, DTypeCombo formats, int64_t max_batch) {
  if (spec.size) return draw_sized(spec, formats);
  Dims n = draw_dims(spec, max_batch);
  if (is_block_format(formats.kv)) {  // SPEC 1.2: rows of whole blocks of 32
    n.dk = kBlockValues * ((n.dk + kBlockValues - 1) / kBlockValues);
    n.dv = kBlockValues * ((n.dv + kBlockValues - 1) / kBlockValues);
  }
  const Structure st = draw_structure(spec, n.tk);
  // Bottom-right causal leaves the first tq - tk queries without keys.
  if (st.causal && st.align == Align::bottom_right) n.tq = std::min(n.tq, n.tk);

  Problem p = Problem::zeros(spec.dtype, n.batch, n.heads, n.kv_heads, n.tq, n.tk, n.dk, n.dv);
  p.causal = st.causal;
  p.align = st.align;
  p.window_left = st.left;
  p.window_right = st.right;
  draw_constraints(p, spec);
  const auto layout = static_cast<Layout>(has(spec.features, ATTNCHECK_FEATURE_STRIDES) ? pick(3) : 0);
  draw_tensors(p, spec, formats, n, layout);
  if (formats.q != spec.dtype) p.q_dtype = formats.q;
  if (formats.kv != spec.dtype) p.kv_dtype = formats.kv;
  count_dense(p, st, n, layout, spec);
  repair_empty_rows(p);
  return p;
}

}  // namespace attncheck::gen::detail
