#include "attncheck/problem.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/fields.h"

namespace attncheck {

std::array<int64_t, 4> contiguous_strides(int64_t, int64_t d1, int64_t d2,
                                          int64_t d3) {
  return {d1 * d2 * d3, d2 * d3, d3, 1};
}

Tensor make_tensor(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  Tensor t;
  t.data.assign(static_cast<size_t>(d0 * d1 * d2 * d3), 0.0);
  t.strides = contiguous_strides(d0, d1, d2, d3);
  return t;
}

double Problem::default_scale(int64_t dk) {
  // 1.0 / sqrt(dk) rounds twice; pick whichever neighbour is nearest to the
  // exact 1/sqrt(dk) by comparing with the midpoint in binary128, where the
  // 54-bit midpoint squares exactly.
  const double r = 1.0 / std::sqrt(static_cast<double>(dk));
  double best = r;
  for (double c : {std::nextafter(r, 0.0), std::nextafter(r, 2.0)}) {
    const double lo = std::min(best, c), hi = std::max(best, c);
    const __float128 mid = (static_cast<__float128>(lo) + hi) / 2;
    // 1/sqrt(dk) < mid  <=>  mid^2 dk > 1: then lo is nearer.
    const bool lo_nearer = mid * mid * static_cast<__float128>(dk) > 1;
    best = lo_nearer ? lo : hi;
  }
  return best;
}

Problem Problem::zeros(DType dtype, int64_t batch, int64_t heads,
                       int64_t kv_heads, int64_t tq, int64_t tk, int64_t dk,
                       int64_t dv) {
  Problem p;
  p.dtype = dtype;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.tq = tq;
  p.tk = tk;
  p.dk = dk;
  p.dv = dv;
  p.q = make_tensor(batch, heads, tq, dk);
  p.k = make_tensor(batch, kv_heads, tk, dk);
  p.v = make_tensor(batch, kv_heads, tk, dv);
  p.scale = default_scale(dk);
  return p;
}

int64_t Problem::seq_tq(int64_t b) const {
  if (!packed_q()) return tq;
  const auto& cu = packed->cu_seqlens_q;
  return cu[static_cast<size_t>(b + 1)] - cu[static_cast<size_t>(b)];
}

int64_t Problem::seq_tk(int64_t b) const {
  if (paged) return paged->seqlens_k[static_cast<size_t>(b)];
  if (!packed_k()) return tk;
  const auto& cu = packed->cu_seqlens_k;
  return cu[static_cast<size_t>(b + 1)] - cu[static_cast<size_t>(b)];
}

int64_t Problem::total_q() const {
  return packed_q() ? packed->cu_seqlens_q.back() : batch * tq;
}

size_t Problem::q_offset(int64_t b, int64_t h, int64_t i, int64_t d) const {
  const auto& s = q.strides;
  const int64_t row = packed_q() ? packed->cu_seqlens_q[static_cast<size_t>(b)] + i : i;
  return static_cast<size_t>((packed_q() ? 0 : b * s[0]) + h * s[1] + row * s[2] + d * s[3]);
}

size_t Problem::kv_offset(const Tensor& t, int64_t b, int64_t g, int64_t j, int64_t d) const {
  const auto& s = t.strides;
  if (paged) {
    const int64_t page =
        paged->block_table[static_cast<size_t>(b * paged->block_table_stride + j / paged->page_size)];
    return static_cast<size_t>(page * s[0] + g * s[1] + (j % paged->page_size) * s[2] + d * s[3]);
  }
  if (packed_k()) {
    const int64_t row = packed->cu_seqlens_k[static_cast<size_t>(b)] + j;
    return static_cast<size_t>(g * s[1] + row * s[2] + d * s[3]);
  }
  return static_cast<size_t>(b * s[0] + g * s[1] + j * s[2] + d * s[3]);
}

double Problem::q_at(int64_t b, int64_t h, int64_t i, int64_t d) const {
  return q.data[q_offset(b, h, i, d)];
}
double Problem::k_at(int64_t b, int64_t g, int64_t j, int64_t d) const {
  return k.data[kv_offset(k, b, g, j, d)];
}
double Problem::v_at(int64_t b, int64_t g, int64_t j, int64_t d) const {
  return v.data[kv_offset(v, b, g, j, d)];
}

KeyBand Problem::causal_band(int64_t i) const {
  return {0, causal ? std::min(tk - 1, position(i)) : tk - 1};
}

KeyBand Problem::window_band(int64_t i) const {
  const int64_t pos = position(i);
  KeyBand band{0, tk - 1};
  if (window_left >= 0) band.first = std::max(band.first, pos - window_left);
  if (window_right >= 0) band.last = std::min(band.last, pos + window_right);
  return band;
}

KeyBand Problem::key_band(int64_t i) const {
  KeyBand band = window_band(i);
  band.last = std::min(band.last, causal_band(i).last);
  return band;
}

KeyBand Problem::window_band(int64_t b, int64_t i) const {
  if (!varlen()) return window_band(i);
  const int64_t pos = position(b, i);
  KeyBand band{0, seq_tk(b) - 1};
  if (window_left >= 0) band.first = std::max(band.first, pos - window_left);
  if (window_right >= 0) band.last = std::min(band.last, pos + window_right);
  return band;
}

KeyBand Problem::key_band(int64_t b, int64_t i) const {
  if (!varlen()) return key_band(i);
  KeyBand band = window_band(b, i);
  if (causal) band.last = std::min(band.last, position(b, i));
  return band;
}

bool Problem::allowed(int64_t b, int64_t h, int64_t i, int64_t j) const {
  if (varlen()) {
    // SPEC 1.1's table: packed and paged problems have no key_valid, mask
    // or bias.
    return i < seq_tq(b) && key_band(b, i).contains(j);
  }
  if (!key_valid.empty() && !key_valid[static_cast<size_t>(b * tk + j)]) {
    return false;
  }
  if (!key_band(i).contains(j)) return false;
  if (mask && !mask->at(b, h, i, j, tq, tk)) return false;
  return true;
}

int64_t Problem::allowed_count(int64_t b, int64_t h, int64_t i) const {
  int64_t n = 0;
  for (int64_t j = 0; j < tk; ++j) n += allowed(b, h, i, j) ? 1 : 0;
  return n;
}

bool Problem::has_empty_rows() const {
  // SPEC 1.1: with a sink a row without keys is not empty (it holds the sink).
  if (!sink.empty()) return false;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq_tq(b); ++i)
        if (allowed_count(b, h, i) == 0) return true;
  return false;
}

int64_t Problem::score_bytes(DType d) const {
  const bool fp8 = d == DType::e4m3 || d == DType::e5m2;
  const int64_t bytes = d == DType::f64 ? 8 : d == DType::f32 ? 4 : fp8 ? 1 : 2;
  return score_elements() * bytes;
}

uint32_t Problem::serving_features() const {
  uint32_t f = 0;
  if (!sink.empty()) f |= ATTNCHECK_FEATURE_SINK;
  if (packed) f |= ATTNCHECK_FEATURE_PACKED;
  if (paged) f |= ATTNCHECK_FEATURE_PAGED_KV;
  if (descale) f |= ATTNCHECK_FEATURE_DESCALE;
  return f;
}

bool Problem::needs_abi_v2() const {
  return serving_features() != 0 || q_dtype.value_or(dtype) != dtype ||
         kv_dtype.value_or(dtype) != dtype;
}

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

void check_values(const Tensor& t, const char* name, std::array<int64_t, 4> shape,
                  DType dtype);

void check_tensor(const Tensor& t, const char* name,
                  std::array<int64_t, 4> shape, DType dtype) {
  int64_t last = 0;
  for (int k = 0; k < 4; ++k) {
    require(t.strides[k] >= 0,
            fmt::format("{}: stride {} is negative", name, k));
    last += (shape[k] - 1) * t.strides[k];
  }
  require(static_cast<int64_t>(t.data.size()) > last,
          fmt::format("{}: {} elements do not cover shape [{}, {}, {}, {}]",
                      name, t.data.size(), shape[0], shape[1], shape[2],
                      shape[3]));
  check_values(t, name, shape, dtype);
}

// K or V in a block format (SPEC 1.2): each row along the head dimension
// is whole blocks of 32, so the strides count elements in multiples of 32
// except the innermost, and every block is exactly one block of the format
// (its values an f16 scale times the format's integers).
void check_block_tensor(const Tensor& t, const char* name, std::array<int64_t, 4> shape,
                        DType dtype) {
  const std::string_view format = dtype_name(dtype);
  require(shape[3] % kBlockValues == 0,
          fmt::format("{}: head dimension {} is not a multiple of {} ({} stores blocks of {})",
                      name, shape[3], kBlockValues, format, kBlockValues));
  require(t.strides[3] == 1,
          fmt::format("{}: innermost stride {} must be 1 in {} (a block is 32 consecutive "
                      "values)",
                      name, t.strides[3], format));
  for (int k = 0; k < 3; ++k) {
    require(t.strides[k] % kBlockValues == 0,
            fmt::format("{}: stride {} is {}, not a multiple of {} as {} blocks need", name, k,
                        t.strides[k], kBlockValues, format));
  }
  std::array<double, kBlockValues> block{};
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t r = 0; r < shape[2]; ++r)
        for (int64_t first = 0; first < shape[3]; first += kBlockValues) {
          for (int64_t e = 0; e < kBlockValues; ++e) block[e] = t.at(a, b, r, first + e);
          if (!is_exact_block(dtype, block)) {
            throw InputError(fmt::format("{}[{}][{}][{}][{}..{}]: not one {} block (an f16 scale "
                                         "times integers in [{}, {}])",
                                         name, a, b, r, first, first + kBlockValues - 1, format,
                                         block_int_min(dtype), block_int_max(dtype)));
          }
        }
}

// A tensor's element values in its format: one by one, or block by block.
void check_values(const Tensor& t, const char* name, std::array<int64_t, 4> shape,
                  DType dtype) {
  if (is_block_format(dtype)) {
    check_block_tensor(t, name, shape, dtype);
    return;
  }
  // The message is made only for the value that fails: formatting one
  // per element took most of the reading of a large problem.
  for (double x : t.data) {
    if (!representable(dtype, x)) {
      throw InputError(fmt::format("{}: value {} is not representable in {}", name, x, dtype_name(dtype)));
    }
  }
}

}  // namespace

void Problem::validate() const {
  require(batch >= 1 && heads >= 1 && kv_heads >= 1 && tq >= 1 && tk >= 1 &&
              dk >= 1 && dv >= 1,
          "dims: batch, heads, kv_heads, tq, tk, dk and dv must be >= 1");
  require(heads % kv_heads == 0,
          fmt::format("kv_heads: {} does not divide heads = {}", kv_heads, heads));
  require(is_output_format(dtype),
          fmt::format("dtype: {} is an input format only (outputs are f64, f32, bf16 or f16)",
                      dtype_name(dtype)));
  require(!q_dtype || !is_block_format(*q_dtype),
          fmt::format("q_dtype: {} is a K/V format only (SPEC 1.2; q is f64, f32, bf16, f16, "
                      "e4m3 or e5m2)",
                      q_dtype ? dtype_name(*q_dtype) : ""));
  validate_sequences();
  check_tensor(q, "q", {packed_q() ? 1 : batch, heads, packed_q() ? total_q() : tq, dk},
               q_dtype.value_or(dtype));
  const std::array<int64_t, 4> k_shape =
      paged       ? std::array<int64_t, 4>{paged->num_pages, kv_heads, paged->page_size, dk}
      : packed_k() ? std::array<int64_t, 4>{1, kv_heads, packed->cu_seqlens_k.back(), dk}
                   : std::array<int64_t, 4>{batch, kv_heads, tk, dk};
  std::array<int64_t, 4> v_shape = k_shape;
  v_shape[3] = dv;
  check_tensor(k, "k", k_shape, kv_dtype.value_or(dtype));
  check_tensor(v, "v", v_shape, kv_dtype.value_or(dtype));
  if (!key_valid.empty()) {
    require(static_cast<int64_t>(key_valid.size()) == batch * tk,
            fmt::format("key_valid: {} entries, expected batch * tk = {}",
                        key_valid.size(), batch * tk));
    for (uint8_t x : key_valid) require(x <= 1, "key_valid: entries must be 0 or 1");
  }
  if (mask) {
    require((mask->batch == 1 || mask->batch == batch) &&
                (mask->heads == 1 || mask->heads == heads),
            fmt::format("mask: shape [{}, {}, ...] does not broadcast to [{}, {}]",
                        mask->batch, mask->heads, batch, heads));
    require(static_cast<int64_t>(mask->data.size()) ==
                mask->batch * mask->heads * tq * tk,
            "mask: data size does not match its shape");
    for (uint8_t x : mask->data) require(x <= 1, "mask: entries must be 0 or 1");
  }
  if (bias) {
    require((bias->batch == 1 || bias->batch == batch) &&
                (bias->heads == 1 || bias->heads == heads),
            fmt::format("bias: shape [{}, {}, ...] does not broadcast to [{}, {}]",
                        bias->batch, bias->heads, batch, heads));
    require(static_cast<int64_t>(bias->data.size()) ==
                bias->batch * bias->heads * tq * tk,
            "bias: data size does not match its shape");
    for (double x : bias->data) {
      if (!(std::isfinite(x) && representable(dtype, x))) {
        throw InputError(fmt::format("bias: value {} is not finite and representable in {}", x,
                                     dtype_name(dtype)));
      }
    }
  }
  require(window_left >= -1 && window_right >= -1,
          "window: bounds must be >= -1 (-1 = unbounded)");
  require(std::isfinite(scale), "scale: must be finite");
  require(std::isfinite(softcap) && softcap >= 0, "softcap: must be finite and >= 0");
  if (!dout.empty()) {
    require(static_cast<int64_t>(dout.size()) == total_q() * heads * dv,
            packed_q() ? "dout: size must be total_q * heads * dv"
                       : "dout: size must be batch * heads * tq * dv");
    require(!paged, "dout: paged K/V has no backward (SPEC 1.1)");
    require(!is_block_format(kv_dtype.value_or(dtype)),
            fmt::format("dout: K/V in {} has no backward (SPEC 1.2)",
                        dtype_name(kv_dtype.value_or(dtype))));
  }
  if (!sink.empty()) {
    require(static_cast<int64_t>(sink.size()) == heads,
            fmt::format("sink: {} entries, expected heads = {}", sink.size(), heads));
    for (double x : sink) require(std::isfinite(x), "sink: entries must be finite");
  }
  if (descale) {
    for (double x : {descale->q, descale->k, descale->v}) {
      require(std::isfinite(x) && x > 0,
              fmt::format("descale: {} is not finite and positive", x));
    }
  }
}

void Problem::validate_sequences() const {
  const auto check_cu = [&](const std::vector<int64_t>& cu, const char* name, int64_t longest) {
    require(static_cast<int64_t>(cu.size()) == batch + 1,
            fmt::format("{}: {} entries, expected batch + 1 = {}", name, cu.size(), batch + 1));
    require(cu[0] == 0, fmt::format("{}: must start at 0", name));
    int64_t most = 0;
    for (size_t b = 0; b + 1 < cu.size(); ++b) {
      require(cu[b + 1] >= cu[b], fmt::format("{}: offsets must not decrease", name));
      most = std::max(most, cu[b + 1] - cu[b]);
    }
    require(most == longest,
            fmt::format("{}: the longest sequence has {}, but the problem says {}", name, most,
                        longest));
  };
  if (packed) {
    require(packed_q() || packed_k(), "packed: neither cu_seqlens_q nor cu_seqlens_k is given");
    if (packed_q()) check_cu(packed->cu_seqlens_q, "cu_seqlens_q", tq);
    if (packed_k()) check_cu(packed->cu_seqlens_k, "cu_seqlens_k", tk);
  }
  if (paged) {
    require(!packed_k(), "paged: keys are paged or packed (cu_seqlens_k), not both");
    const PagedKv& pg = *paged;
    require(pg.page_size >= 1 && pg.num_pages >= 1,
            "paged: page_size and num_pages must be >= 1");
    require(static_cast<int64_t>(pg.seqlens_k.size()) == batch,
            fmt::format("paged.seqlens_k: {} entries, expected batch = {}", pg.seqlens_k.size(),
                        batch));
    int64_t most = 0;
    for (int64_t n : pg.seqlens_k) {
      require(n >= 0, "paged.seqlens_k: entries must be >= 0");
      most = std::max(most, n);
    }
    require(most == tk, fmt::format("paged.seqlens_k: the longest sequence has {} keys, but tk is {}",
                                    most, tk));
    require(pg.block_table_stride >= (tk + pg.page_size - 1) / pg.page_size,
            fmt::format("paged.block_table: stride {} holds fewer pages than tk = {} needs",
                        pg.block_table_stride, tk));
    require(static_cast<int64_t>(pg.block_table.size()) == batch * pg.block_table_stride,
            "paged.block_table: size must be batch * block_table_stride");
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t s = 0; s * pg.page_size < pg.seqlens_k[static_cast<size_t>(b)]; ++s) {
        const int64_t page = pg.block_table[static_cast<size_t>(b * pg.block_table_stride + s)];
        require(page >= 0 && page < pg.num_pages,
                fmt::format("paged.block_table: sequence {} page {} is {}, outside [0, {})", b, s,
                            page, pg.num_pages));
      }
    }
  }
  if (varlen()) {
    require(key_valid.empty() && !mask && !bias,
            "packed and paged problems take no key_valid, mask or bias (SPEC 1.1)");
    if (packed_q() || packed_k()) {
      for (const auto* t : {&q, &k, &v}) {
        if ((t == &q && packed_q()) || (t != &q && packed_k())) {
          require(t->strides[0] == 0, "packed tensors: stride 0 must be 0");
        }
      }
    }
  }
}

Problem Problem::contiguous() const {
  if (varlen()) return contiguous_varlen();
  Problem c = *this;
  auto pack = [](const Tensor& t, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    Tensor out = make_tensor(d0, d1, d2, d3);
    for (int64_t a = 0; a < d0; ++a)
      for (int64_t b = 0; b < d1; ++b)
        for (int64_t i = 0; i < d2; ++i)
          for (int64_t d = 0; d < d3; ++d) out.at(a, b, i, d) = t.at(a, b, i, d);
    return out;
  };
  c.q = pack(q, batch, heads, tq, dk);
  c.k = pack(k, batch, kv_heads, tk, dk);
  c.v = pack(v, batch, kv_heads, tk, dv);
  return c;
}

Problem Problem::contiguous_varlen() const {
  Problem c = *this;
  if (packed_q()) {
    c.q = make_tensor(1, total_q(), heads, dk);
    c.q.strides = {0, dk, heads * dk, 1};
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < seq_tq(b); ++i)
          for (int64_t d = 0; d < dk; ++d) c.q.data[c.q_offset(b, h, i, d)] = q_at(b, h, i, d);
  } else {
    c.q = make_tensor(batch, heads, tq, dk);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < tq; ++i)
          for (int64_t d = 0; d < dk; ++d) c.q.at(b, h, i, d) = q.at(b, h, i, d);
  }
  // Every stored K/V element is kept (a page's stale tail, unused pages:
  // PagedEqualsContiguous fills them on purpose).
  const auto repack = [&](const Tensor& t, int64_t width) {
    if (paged) {
      Tensor out = make_tensor(paged->num_pages, kv_heads, paged->page_size, width);
      for (int64_t pg = 0; pg < paged->num_pages; ++pg)
        for (int64_t g = 0; g < kv_heads; ++g)
          for (int64_t s = 0; s < paged->page_size; ++s)
            for (int64_t d = 0; d < width; ++d) out.at(pg, g, s, d) = t.at(pg, g, s, d);
      return out;
    }
    if (packed_k()) {
      const int64_t rows = packed->cu_seqlens_k.back();
      Tensor out = make_tensor(1, rows, kv_heads, width);
      out.strides = {0, width, kv_heads * width, 1};
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < kv_heads; ++g)
          for (int64_t d = 0; d < width; ++d)
            out.data[static_cast<size_t>(g * out.strides[1] + r * out.strides[2] + d)] =
                t.data[static_cast<size_t>(g * t.strides[1] + r * t.strides[2] + d * t.strides[3])];
      return out;
    }
    Tensor out = make_tensor(batch, kv_heads, tk, width);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t g = 0; g < kv_heads; ++g)
        for (int64_t j = 0; j < tk; ++j)
          for (int64_t d = 0; d < width; ++d) out.at(b, g, j, d) = t.at(b, g, j, d);
    return out;
  };
  c.k = repack(k, dk);
  c.v = repack(v, dv);
  return c;
}

Problem sequence_problem(const Problem& p, int64_t b) {
  const int64_t nq = p.seq_tq(b), nk = p.seq_tk(b);
  if (nq < 1) {
    throw std::invalid_argument(fmt::format("sequence {} has no queries", b));
  }
  Problem s = Problem::zeros(p.dtype, 1, p.heads, p.kv_heads, nq, std::max<int64_t>(nk, 1), p.dk,
                             p.dv);
  // Every field a sequence takes as it is (core/fields.h: kSequence): the
  // score parameters, the masks' rules, the formats, descales and sinks.
  // The shape, the tensors and the masks are cut out below.
  fields::copy_fields(fields::kProblemFields, fields::kSequence, p, s);
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t d = 0; d < p.dk; ++d) s.q.at(0, h, i, d) = p.q_at(b, h, i, d);
  for (int64_t g = 0; g < p.kv_heads; ++g)
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t d = 0; d < p.dk; ++d) s.k.at(0, g, j, d) = p.k_at(b, g, j, d);
      for (int64_t d = 0; d < p.dv; ++d) s.v.at(0, g, j, d) = p.v_at(b, g, j, d);
    }
  if (nk == 0) {
    // No key: one zero key that key_valid disallows (bottom-right alignment
    // moves by one key, but every row is empty either way).
    s.key_valid.assign(1, 0);
  } else if (!p.varlen()) {
    if (!p.key_valid.empty()) {
      s.key_valid.assign(p.key_valid.begin() + b * p.tk, p.key_valid.begin() + (b + 1) * p.tk);
    }
    const auto slice = [&](const auto& bc) {
      auto out = bc;
      out.batch = 1;
      const size_t per = bc.data.size() / static_cast<size_t>(bc.batch);
      const size_t from = bc.batch == 1 ? 0 : static_cast<size_t>(b) * per;
      out.data.assign(bc.data.begin() + static_cast<std::ptrdiff_t>(from),
                      bc.data.begin() + static_cast<std::ptrdiff_t>(from + per));
      return out;
    };
    if (p.mask) s.mask = slice(*p.mask);
    if (p.bias) s.bias = slice(*p.bias);
  }
  if (!p.dout.empty()) {
    s.dout.assign(static_cast<size_t>(p.heads * nq * p.dv), 0.0);
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t d = 0; d < p.dv; ++d)
          s.dout[out_index(s, 0, h, i, d)] = p.dout[out_index(p, b, h, i, d)];
  }
  return s;
}

}  // namespace attncheck
