// The shrunk problem as text, for failure reports and RapidCheck's printing.

#include <array>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/fields.h"
#include "properties/case_context.h"

namespace attncheck {

namespace {

std::string matrix(const Tensor& t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  std::string s = "[";
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> row;
    for (int64_t d = 0; d < cols; ++d) row.push_back(t.at(b, h, i, d));
    s += fmt::format("{}[{}]", i ? ", " : "", fmt::join(row, ", "));
  }
  return s + "]";
}

// A matrix with each run of equal consecutive rows as "[row] x N": a long
// row of keys that shrank to q = 0 and small integers reads in a line.
std::string run_length_matrix(const Tensor& t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  std::string s = "[";
  std::vector<double> last;
  int64_t run = 0;
  const auto flush = [&] {
    if (run == 0) return;
    s += fmt::format("{}[{}]{}", s.size() > 1 ? ", " : "", fmt::join(last, ", "),
                     run > 1 ? fmt::format(" x {}", run) : "");
  };
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> row;
    for (int64_t d = 0; d < cols; ++d) row.push_back(t.at(b, h, i, d));
    if (run > 0 && row == last) {
      ++run;
      continue;
    }
    flush();
    last = std::move(row);
    run = 1;
  }
  flush();
  return s + "]";
}

template <typename T>
std::string score_matrix(const Broadcast<T>& m, int64_t b, int64_t h, int64_t tq, int64_t tk) {
  std::string s = "[";
  for (int64_t i = 0; i < tq; ++i) {
    std::vector<double> row;
    for (int64_t j = 0; j < tk; ++j) row.push_back(static_cast<double>(m.at(b, h, i, j, tq, tk)));
    s += fmt::format("{}[{}]", i ? ", " : "", fmt::join(row, ", "));
  }
  return s + "]";
}

// describe's header: the shape on one line, the score parameters on the
// next, each plain field (core/fields.h's GenericValue) as "name value" by
// the walk. Fields these lines do not place (a new plain one) follow the
// window on the second line; the fields this file lays out itself are
// kShownByHand.
constexpr std::array<std::string_view, 8> kShapeLine{"dtype", "batch", "heads", "kv_heads",
                                                      "tq",    "tk",    "dk",    "dv"};
constexpr std::array<std::string_view, 3> kScoreLine{"scale", "softcap", "causal"};
constexpr std::array<std::string_view, 15> kShownByHand{
    "q",    "k",           "v",            "key_valid", "mask",     "bias",
    "align", "window_left", "window_right", "q_dtype",   "kv_dtype", "descale",
    "sink", "packed",      "paged"};
static_assert(fields::handled_by(fields::kProblemFields, fields::kDescribe, kShownByHand),
              "a Problem field describe shows is neither laid out here nor of a plain type");

// A plain value as describe's text shows it; "" for an unset optional.
template <typename T>
std::string plain_text(const T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x ? "yes" : "no";
  } else if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(x));
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return x ? std::string(dtype_name(*x)) : std::string();
  } else {
    return fmt::format("{}", x);
  }
}

// "name value" of the plain fields `names` names, in its order, two spaces
// apart.
template <size_t N>
std::string plain_fields(const Problem& p, const std::array<std::string_view, N>& names) {
  std::string s;
  for (std::string_view name : names) {
    fields::for_each_problem_field(p, [&](const fields::Field& f, const auto& m) {
      if constexpr (fields::GenericValue<std::remove_cvref_t<decltype(m)>>) {
        if (f.name == name && f.in(fields::kDescribe)) {
          s += fmt::format("{}{} {}", s.empty() ? "" : "  ", f.shown_as, plain_text(m));
        }
      }
    });
  }
  return s;
}

// The plain fields neither line places, each "  name value" (an unset
// optional not at all).
std::string other_plain_fields(const Problem& p) {
  std::string s;
  fields::for_each_problem_field(p, [&](const fields::Field& f, const auto& m) {
    if constexpr (fields::GenericValue<std::remove_cvref_t<decltype(m)>>) {
      const bool placed = fields::named(f.name, kShapeLine) || fields::named(f.name, kScoreLine) ||
                          fields::named(f.name, kShownByHand);
      const std::string value = plain_text(m);
      if (f.in(fields::kDescribe) && !placed && !value.empty()) {
        s += fmt::format("  {} {}", f.shown_as, value);
      }
    }
  });
  return s;
}

}  // namespace

std::string describe_problem(const Problem& p) {
  std::ostringstream os;
  os << fmt::format("    {}\n    {}  align {}  window [{}, {}]{}  strides q [{}]\n",
                    plain_fields(p, kShapeLine), plain_fields(p, kScoreLine),
                    p.align == Align::top_left ? "top_left" : "bottom_right", p.window_left,
                    p.window_right, other_plain_fields(p), fmt::join(p.q.strides, ", "));
  if (!p.key_valid.empty()) {
    std::vector<int> kv(p.key_valid.begin(), p.key_valid.end());
    os << fmt::format("    key_valid [b][tk] = [{}]\n", fmt::join(kv, ", "));
  }
  // Version 2 parts (SPEC 1.1).
  const DTypeCombo formats = combo_of(p);
  if (formats.q != p.dtype || formats.kv != p.dtype) {
    os << fmt::format("    formats {}\n", combo_name(formats));
  }
  if (p.descale) {
    os << fmt::format("    descale q {}  k {}  v {}\n", p.descale->q, p.descale->k, p.descale->v);
  }
  if (!p.sink.empty()) os << fmt::format("    sink [h] = [{}]\n", fmt::join(p.sink, ", "));
  if (p.packed_q()) {
    os << fmt::format("    cu_seqlens_q = [{}]\n", fmt::join(p.packed->cu_seqlens_q, ", "));
  }
  if (p.packed_k()) {
    os << fmt::format("    cu_seqlens_k = [{}]\n", fmt::join(p.packed->cu_seqlens_k, ", "));
  }
  if (p.paged) {
    os << fmt::format(
        "    paged: page_size {}  num_pages {}  seqlens_k [{}]  block_table [b][{}] = [{}]\n",
        p.paged->page_size, p.paged->num_pages, fmt::join(p.paged->seqlens_k, ", "),
        p.paged->block_table_stride, fmt::join(p.paged->block_table, ", "));
  }
  if (p.varlen()) {
    // Each sequence as the dense problem it is judged as.
    const bool small_v = p.batch <= 4 && p.heads <= 4 && p.tq <= 8 && p.tk <= 8 && p.dk <= 8 &&
                         p.dv <= 8;
    if (!small_v) {
      os << "    (values omitted: the problem is large; see the fixture)\n";
      return os.str();
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.seq_tq(b) == 0) {
        os << fmt::format("    sequence {}: no queries, {} keys\n", b, p.seq_tk(b));
        continue;
      }
      const Problem s = sequence_problem(p, b);
      os << fmt::format("    sequence {}: tq {}  tk {}\n", b, p.seq_tq(b), p.seq_tk(b));
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = s.kv_head(h);
        os << fmt::format("      [h={}] Q = {}\n", h, matrix(s.q, 0, h, s.tq, s.dk));
        if (h % (s.heads / s.kv_heads) == 0 && p.seq_tk(b) > 0) {
          os << fmt::format("      [kv_h={}] K = {}\n", g, matrix(s.k, 0, g, p.seq_tk(b), s.dk));
          os << fmt::format("      [kv_h={}] V = {}\n", g, matrix(s.v, 0, g, p.seq_tk(b), s.dv));
        }
      }
    }
    return os.str();
  }
  const bool small = p.batch * p.heads <= 4 && p.tq <= 8 && p.tk <= 8 && p.dk <= 8 && p.dv <= 8;
  if (!small) {
    // Up to a few hundred values, or rows that repeat (run-length form):
    // shown, K and V row by row; past that, the fixture holds them.
    const int64_t values = p.batch * (p.heads * p.tq * p.dk + p.kv_heads * p.tk * (p.dk + p.dv));
    std::string text;
    for (int64_t b = 0; b < p.batch && p.batch * p.heads <= 4; ++b)
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t g = p.kv_head(h);
        text += fmt::format("    [b={}, h={}] Q = {}\n", b, h, run_length_matrix(p.q, b, h, p.tq, p.dk));
        if (h % (p.heads / p.kv_heads) == 0) {
          text += fmt::format("    [b={}, kv_h={}] K = {}\n", b, g, run_length_matrix(p.k, b, g, p.tk, p.dk));
          text += fmt::format("    [b={}, kv_h={}] V = {}\n", b, g, run_length_matrix(p.v, b, g, p.tk, p.dv));
        }
      }
    if (text.empty() || (values > 400 && text.size() > 4000)) {
      os << "    (values omitted: the problem is large; see the fixture)\n";
    } else {
      os << text;
      if (p.mask || p.bias) os << "    (mask and bias: see the fixture)\n";
    }
    return os.str();
  }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      os << fmt::format("    [b={}, h={}] Q = {}\n", b, h, matrix(p.q, b, h, p.tq, p.dk));
      if (h % (p.heads / p.kv_heads) == 0) {
        os << fmt::format("    [b={}, kv_h={}] K = {}\n", b, g, matrix(p.k, b, g, p.tk, p.dk));
        os << fmt::format("    [b={}, kv_h={}] V = {}\n", b, g, matrix(p.v, b, g, p.tk, p.dv));
      }
      if (p.mask) os << fmt::format("    [b={}, h={}] mask = {}\n", b, h, score_matrix(*p.mask, b, h, p.tq, p.tk));
      if (p.bias) os << fmt::format("    [b={}, h={}] bias = {}\n", b, h, score_matrix(*p.bias, b, h, p.tq, p.tk));
    }
  return os.str();
}

void showValue(const Problem& p, std::ostream& os) { os << "\n" << describe_problem(p); }

}  // namespace attncheck
