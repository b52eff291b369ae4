#include "attncheck/problem.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "attncheck/error.h"

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

bool Problem::allowed(int64_t b, int64_t h, int64_t i, int64_t j) const {
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
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < tq; ++i)
        if (allowed_count(b, h, i) == 0) return true;
  return false;
}

int64_t Problem::score_bytes(DType d) const {
  const bool fp8 = d == DType::e4m3 || d == DType::e5m2;
  const int64_t bytes = d == DType::f64 ? 8 : d == DType::f32 ? 4 : fp8 ? 1 : 2;
  return score_elements() * bytes;
}

uint32_t Problem::v2_features() const {
  uint32_t f = 0;
  if (!sink.empty()) f |= ATTNCHECK_FEATURE_SINK;
  if (packed) f |= ATTNCHECK_FEATURE_PACKED;
  if (paged) f |= ATTNCHECK_FEATURE_PAGED_KV;
  if (descale) f |= ATTNCHECK_FEATURE_DESCALE;
  return f;
}

bool Problem::needs_v2() const {
  return v2_features() != 0 || q_dtype.value_or(dtype) != dtype ||
         kv_dtype.value_or(dtype) != dtype;
}

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

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
  for (double x : t.data) {
    require(representable(dtype, x),
            fmt::format("{}: value {} is not representable in {}", name, x,
                        dtype_name(dtype)));
  }
}

}  // namespace

void Problem::validate() const {
  require(batch >= 1 && heads >= 1 && kv_heads >= 1 && tq >= 1 && tk >= 1 &&
              dk >= 1 && dv >= 1,
          "dims: batch, heads, kv_heads, tq, tk, dk and dv must be >= 1");
  require(heads % kv_heads == 0,
          fmt::format("kv_heads: {} does not divide heads = {}", kv_heads, heads));
  require(dtype != DType::e4m3 && dtype != DType::e5m2,
          fmt::format("dtype: {} is an input format only (outputs are f64, f32, bf16 or f16)",
                      dtype_name(dtype)));
  check_tensor(q, "q", {batch, heads, tq, dk}, q_dtype.value_or(dtype));
  check_tensor(k, "k", {batch, kv_heads, tk, dk}, kv_dtype.value_or(dtype));
  check_tensor(v, "v", {batch, kv_heads, tk, dv}, kv_dtype.value_or(dtype));
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
      require(std::isfinite(x) && representable(dtype, x),
              fmt::format("bias: value {} is not finite and representable in {}",
                          x, dtype_name(dtype)));
    }
  }
  require(window_left >= -1 && window_right >= -1,
          "window: bounds must be >= -1 (-1 = unbounded)");
  require(std::isfinite(scale), "scale: must be finite");
  require(std::isfinite(softcap) && softcap >= 0, "softcap: must be finite and >= 0");
  if (!dout.empty()) {
    require(static_cast<int64_t>(dout.size()) == batch * heads * tq * dv,
            "dout: size must be batch * heads * tq * dv");
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

Problem Problem::contiguous() const {
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

}  // namespace attncheck
