#include "run/outcome_codec.h"

#include <stdexcept>

#include "host/wire.h"

namespace attncheck {
namespace {

using host_detail::Reader;
using host_detail::Writer;

// Adding a member to PropertyOutcome changes its size: the codec below
// must learn it (and the round-trip test must set it) before this builds.
static_assert(sizeof(PropertyOutcome) == 608 || sizeof(void*) != 8,
              "PropertyOutcome changed: add the new member to encode_outcome and "
              "decode_outcome, and to the round-trip test, then update this size");

template <typename T, typename F>
void put_opt(Writer& w, const std::optional<T>& x, F put) {
  w.put<uint8_t>(x.has_value());
  if (x) put(*x);
}

void put_strings(Writer& w, const std::vector<std::string>& v) {
  w.put<uint64_t>(v.size());
  for (const std::string& s : v) w.put_str(s);
}

std::vector<std::string> get_strings(Reader& r) {
  const auto n = r.get<uint64_t>();
  if (n > (uint64_t{1} << 20)) throw std::runtime_error("outcome: too many strings");
  std::vector<std::string> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back(r.get_str());
  return v;
}

}  // namespace

std::string encode_outcome(const PropertyOutcome& o) {
  Writer w;
  w.put_str(o.property);
  w.put_str(o.impl);
  w.put(o.kind);
  w.put(o.dtype);
  put_opt(w, o.combo, [&](const DTypeCombo& c) { w.put(c); });
  w.put(o.status);
  w.put(o.cases);
  w.put(o.discarded);
  w.put(o.max_budget_used);
  put_opt(w, o.real_sizes, [&](const RealSizeCounts& c) { w.put(c); });
  w.put_str(o.message);
  put_opt(w, o.fixture, [&](const std::string& s) { w.put_str(s); });
  put_opt(w, o.fixture_error, [&](const std::string& s) { w.put_str(s); });
  // Member by member: the struct's padding holds no value to send.
  put_opt(w, o.counterexample, [&](const CounterexampleShape& c) {
    for (int64_t x : {c.batch, c.heads, c.kv_heads, c.tq, c.tk, c.dk, c.dv}) w.put(x);
    w.put(c.dtype);
  });
  put_strings(w, o.diagnosis);
  put_opt(w, o.expected, [&](const KnownFinding& k) {
    put_strings(w, {k.cause, k.finding, k.reason, k.fixture});
  });
  put_strings(w, o.also_explained);
  put_opt(w, o.saved, [&](const SavedFailure& f) {
    w.put_str(f.fixture);
    w.put(f.result);
    w.put_str(f.note);
  });
  w.put<uint64_t>(o.coverage.size());
  for (const CoverageTarget& t : o.coverage) {
    w.put_str(t.what);
    w.put(t.reached);
    w.put(t.drawn);
  }
  return w.bytes();
}

PropertyOutcome decode_outcome(const std::string& bytes) {
  Reader r(bytes);
  PropertyOutcome o;
  o.property = r.get_str();
  o.impl = r.get_str();
  o.kind = r.get<Kind>();
  o.dtype = r.get<DType>();
  if (r.get<uint8_t>()) o.combo = r.get<DTypeCombo>();
  o.status = r.get<PropertyStatus>();
  o.cases = r.get<int>();
  o.discarded = r.get<int>();
  o.max_budget_used = r.get<double>();
  if (r.get<uint8_t>()) o.real_sizes = r.get<RealSizeCounts>();
  o.message = r.get_str();
  if (r.get<uint8_t>()) o.fixture = r.get_str();
  if (r.get<uint8_t>()) o.fixture_error = r.get_str();
  if (r.get<uint8_t>()) {
    CounterexampleShape c{};
    for (int64_t* x : {&c.batch, &c.heads, &c.kv_heads, &c.tq, &c.tk, &c.dk, &c.dv})
      *x = r.get<int64_t>();
    c.dtype = r.get<DType>();
    o.counterexample = c;
  }
  o.diagnosis = get_strings(r);
  if (r.get<uint8_t>()) {
    const std::vector<std::string> k = get_strings(r);
    if (k.size() != 4) throw std::runtime_error("outcome: a known finding has four strings");
    o.expected = KnownFinding{k[0], k[1], k[2], k[3]};
  }
  o.also_explained = get_strings(r);
  if (r.get<uint8_t>()) {
    SavedFailure f;
    f.fixture = r.get_str();
    f.result = r.get<SavedFailure::Result>();
    if (f.result > SavedFailure::Result::unreadable) throw std::runtime_error("outcome: a saved failure's result");
    f.note = r.get_str();
    o.saved = std::move(f);
  }
  const auto targets = r.get<uint64_t>();
  if (targets > 64) throw std::runtime_error("outcome: too many coverage targets");
  for (uint64_t i = 0; i < targets; ++i) {
    CoverageTarget t;
    t.what = r.get_str();
    t.reached = r.get<int64_t>();
    t.drawn = r.get<int64_t>();
    o.coverage.push_back(std::move(t));
  }
  r.expect_end();
  return o;
}

}  // namespace attncheck
