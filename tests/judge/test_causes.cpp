// Known causes (judge/causes.h): a call is explained by a cause only when
// every element outside its tolerance is one the cause predicts, so a second
// bug in the same output stays unexplained. Each accumulator class is tried
// on its finding's smallest counterexample and on outputs it must not
// explain.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attncheck/fixture.h"
#include "attncheck/oracle.h"
#include "attncheck/registry.h"
#include "judge/causes.h"
#include "judge/diagnosis.h"

namespace attncheck {
namespace {

const ImplInfo& info_of(const std::string& name) {
  const auto impl = find_impl(name);
  if (!impl) throw std::runtime_error("not registered: " + name);
  static std::vector<std::shared_ptr<const Implementation>> kept;
  kept.push_back(impl);
  return impl->info();
}

// The correct answer for p, as an implementation returns it.
ForwardResult correct_answer(const Problem& p) {
  const OracleResult o = oracle(p);
  ForwardResult r;
  r.status = Status::ok;
  r.out = o.out;
  r.weights = o.weights;
  r.lse = o.lse;
  return r;
}

CallReading reading(const std::string& cause, const Problem& p, const ForwardResult& got,
                    const ImplInfo& info) {
  return read_call({cause}, p, got, info).reading;
}

// F1: two keys of 32768 with equal scores in f16 (docs/ggml.md).
Problem overflow_problem(int64_t dv) {
  Problem p = Problem::zeros(DType::f16, 1, 1, 1, 1, 2, 1, dv);
  for (double& v : p.v.data) v = 32768;
  return p;
}

TEST(KnownCauses, F16OverflowExplainsInfWhereTheSumLeavesF16) {
  const ImplInfo& info = info_of("online_f16");
  const Problem p = overflow_problem(1);
  ForwardResult got = correct_answer(p);
  EXPECT_EQ(reading("f16_pv_sum_overflow", p, got, info), CallReading::correct);
  got.out[0] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reading("f16_pv_sum_overflow", p, got, info), CallReading::explained);
  // The same wrong output as a finite value: not an overflow.
  got.out[0] = 30000;
  EXPECT_EQ(reading("f16_pv_sum_overflow", p, got, info), CallReading::unexplained);
  // Values whose sums stay far inside f16: an inf there is another bug.
  Problem small = p;
  for (double& v : small.v.data) v = 1;
  ForwardResult inf_small = correct_answer(small);
  inf_small.out[0] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reading("f16_pv_sum_overflow", small, inf_small, info), CallReading::unexplained);
}

// stale_running_max: 70 keys, a key block of 64 (online_f32's, as
// broken_max_from_first_block declares): key 66 scores `later` where every
// key of the first block scores 0.
Problem stale_max_problem(double later) {
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 1, 70, 1, 1);
  p.scale = 1;
  p.q.data[0] = 1;
  p.k.at(0, 0, 66, 0) = later;
  for (int64_t j = 0; j < 70; ++j) p.v.at(0, 0, j, 0) = 1;
  return p;
}

TEST(KnownCauses, StaleRunningMaxExplainsNaNWhereALaterKeyOverflowsExp) {
  const ImplInfo& blocked = info_of("online_f32");
  ASSERT_EQ(blocked.precision.key_block, 64);
  // 100 above the first block's max: exp(100) overflows f32 (ln 3.4e38 = 88.7).
  const Problem p = stale_max_problem(100);
  ForwardResult got = correct_answer(p);
  EXPECT_EQ(reading("stale_running_max", p, got, blocked), CallReading::correct);
  got.out[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(reading("stale_running_max", p, got, blocked), CallReading::explained);
  // A finite wrong answer is another bug.
  got.out[0] = 0.5;
  EXPECT_EQ(reading("stale_running_max", p, got, blocked), CallReading::unexplained);
  // 80 above: exp stays finite in f32, so a NaN there is another bug.
  const Problem mild = stale_max_problem(80);
  ForwardResult nan_mild = correct_answer(mild);
  nan_mild.out[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(reading("stale_running_max", mild, nan_mild, blocked), CallReading::unexplained);
  // One pass (no key block declared): no first block to be stale.
  got.out[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(reading("stale_running_max", p, got, info_of("loop_f32")), CallReading::unexplained);
}

TEST(KnownCauses, F16OverflowDoesNotHideASecondBugInTheSameOutput) {
  const ImplInfo& info = info_of("online_f16");
  Problem p = overflow_problem(2);
  // Column 1 holds small values: its sum stays in f16.
  p.v.at(0, 0, 0, 1) = 1;
  p.v.at(0, 0, 1, 1) = 1;
  ForwardResult got = correct_answer(p);
  got.out[0] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reading("f16_pv_sum_overflow", p, got, info), CallReading::explained);
  got.out[1] = 2;  // exact 1: a bug of its own
  EXPECT_EQ(reading("f16_pv_sum_overflow", p, got, info), CallReading::unexplained);
}

TEST(KnownCauses, F16RoundingExplainsStagnationOverLongRowsOnly) {
  const ImplInfo& info = info_of("online_f16");
  // F2: 3000 keys of value 1, equal scores; ggml returns 2048 / 3000.
  Problem p = Problem::zeros(DType::f16, 1, 1, 1, 1, 3000, 1, 1);
  for (double& v : p.v.data) v = 1;
  ForwardResult got = correct_answer(p);
  got.out[0] = 2048.0 / 3000.0;
  EXPECT_EQ(reading("f16_pv_sum_rounding", p, got, info), CallReading::explained);
  // Three keys cannot lose a third of the sum.
  Problem short_row = Problem::zeros(DType::f16, 1, 1, 1, 1, 3, 1, 1);
  for (double& v : short_row.v.data) v = 1;
  ForwardResult wrong = correct_answer(short_row);
  wrong.out[0] = 2.0 / 3.0;
  EXPECT_EQ(reading("f16_pv_sum_rounding", short_row, wrong, info), CallReading::unexplained);
  // Nor is an overflow a rounding loss.
  got.out[0] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reading("f16_pv_sum_rounding", p, got, info), CallReading::unexplained);
}

TEST(KnownCauses, EmptyRowNanExplainsNanOnlyOnRowsWithoutKeys) {
  const ImplInfo& info = info_of("loop_zero_f64");
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, 1, 1, 1);
  p.causal = true;
  p.align = Align::bottom_right;  // query 0 sees no key
  p.tk = 1;
  ForwardResult got = correct_answer(p);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  got.out[0] = nan;
  got.weights[0] = nan;
  EXPECT_EQ(reading("empty_row_nan", p, got, info), CallReading::explained);
  got.out[1] = nan;  // NaN on a row that has its key
  EXPECT_EQ(reading("empty_row_nan", p, got, info), CallReading::unexplained);
}

TEST(KnownCauses, TiledSoftcapPaddingExplainsPhantomKeysOnly) {
  const ImplInfo& info = info_of("loop_f32");
  // F4: 64 queries, one key of value 1, q = k = 0, softcap 1, no mask.
  Problem p = Problem::zeros(DType::f32, 1, 1, 1, 64, 1, 1, 1);
  p.softcap = 1;
  for (double& v : p.v.data) v = 1;
  ForwardResult got = correct_answer(p);
  const double ggml = 1 / (1 + 63 * std::exp(-1.0));
  for (double& o : got.out) o = static_cast<double>(static_cast<float>(ggml));
  // The phantom keys count in the row's sum, so in lse too.
  for (double& l : got.lse) l = static_cast<double>(static_cast<float>(std::log(1 + 63 * std::exp(-1.0))));
  EXPECT_EQ(reading("tiled_softcap_padding", p, got, info), CallReading::explained);
  for (double& o : got.out) o = 0.5;
  EXPECT_EQ(reading("tiled_softcap_padding", p, got, info), CallReading::unexplained);
}

TEST(KnownCauses, EveryCauseIsACatalogueClassAndTheDiagnosisSpeaksItsName) {
  for (const char* name : {"f16_pv_sum_overflow", "f16_pv_sum_rounding", "bf16_pv_sum_rounding",
                           "tiled_softcap_padding", "empty_row_nan"}) {
    EXPECT_TRUE(is_known_cause(name)) << name;
  }
  EXPECT_FALSE(is_known_cause("no_such_class"));
  // The diagnosis names the same class for F1's counterexample.
  const ImplInfo& info = info_of("online_f16");
  const Problem p = overflow_problem(1);
  ForwardResult got = correct_answer(p);
  got.out[0] = std::numeric_limits<double>::infinity();
  const std::vector<std::string> names = diagnose(p, got, info);
  EXPECT_NE(std::find(names.begin(), names.end(), "f16_pv_sum_overflow"), names.end());
}

}  // namespace
}  // namespace attncheck
