// Staged kernels (impls/staged_kernel.h) that misdeclare their arithmetic
// or their path, and one whose f16 accumulator stagnates (SPEC 4.1, and
// SPEC 2's AsAccurateAsBaseline).

#include <memory>

#include "../staged_kernel.h"
#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

constexpr Features kStagedFeatures = kOnlineFeatures & ~ATTNCHECK_FEATURE_STRIDES;

StagedArithmetic pv_f16(int64_t run) {
  StagedArithmetic a;
  a.pv = DType::f16;
  a.pv_run = run;
  return a;
}

std::shared_ptr<const Implementation> declared_f32() {
  ImplInfo info = broken_info("broken_pv_f16_declared_f32", "MatchesOracle",
                              "keeps the P.V sum in an f16 accumulator but declares every "
                              "stage f32",
                              kStagedFeatures);
  info.dtypes = 0;
  info.combos = {{DType::f32, DType::f16, DType::f32}};
  info.precision = staged_precision(StagedArithmetic{});
  return std::make_shared<FunctionImpl>(
      std::move(info), [](const Problem& p) { return staged_forward(p, pv_f16(64)); });
}

ATTNCHECK_REGISTER_IMPL(declared_f32());

// Rounds Q to f16 before q.k (as ggml rounds it to K's format) but
// declares no q_cast: right wherever Q holds f16 values, as every
// real-size value did before the full-mantissa Q of issue 51.
std::shared_ptr<const Implementation> q_f16_undeclared() {
  ImplInfo info = broken_info(bugs::Twin::broken_q_f16_undeclared, "MatchesOracle",
                              kStagedFeatures);
  info.dtypes = 0;
  info.combos = {{DType::f32, DType::f16, DType::f32}};
  info.precision = staged_precision(StagedArithmetic{});
  StagedArithmetic a;
  a.q_cast = DType::f16;
  return std::make_shared<FunctionImpl>(std::move(info),
                                        [a](const Problem& p) { return staged_forward(p, a); });
}

ATTNCHECK_REGISTER_IMPL(q_f16_undeclared());

// Takes the f16 path always but says it took the f32 one.
class WrongPath : public Implementation {
 public:
  WrongPath() {
    info_ = broken_info("broken_path_misreported", "MatchesOracle",
                        "always computes with its f16-accumulator path but reports the f32 "
                        "path",
                        kStagedFeatures);
    info_.dtypes = 0;
    info_.combos = {{DType::f32, DType::f16, DType::f32}};
    info_.paths = {{"short", staged_precision(pv_f16(64))},
                   {"tiled", staged_precision(StagedArithmetic{})}};
    info_.precision = info_.paths[0].precision;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    ForwardResult r = staged_forward(p, pv_f16(64));
    r.path = 1;
    return r;
  }

 private:
  ImplInfo info_;
};

ATTNCHECK_REGISTER_IMPL(std::make_shared<WrongPath>());

// Declared honestly, but one f16 accumulator over the whole row: over
// thousands of near-equal keys with values of one sign the sum stops
// growing at 2048 (f16's spacing there is 2), so 4097 equal keys give
// half the mean. MatchesOracle cannot judge such rows (beyond the first-
// order limit of an f16 accumulator); the baseline can.
std::shared_ptr<const Implementation> stagnates() {
  ImplInfo info = broken_info("broken_pv_f16_stagnates", "AsAccurateAsBaseline",
                              "one f16 P.V accumulator for the whole row (as ggml's CPU flash "
                              "attention keeps it): stagnates over thousands of keys",
                              kStagedFeatures);
  info.dtypes = 0;
  info.combos = {{DType::f32, DType::f16, DType::f32}};
  info.precision = staged_precision(pv_f16(0));
  return std::make_shared<FunctionImpl>(
      std::move(info), [](const Problem& p) { return staged_forward(p, pv_f16(0)); });
}

ATTNCHECK_REGISTER_IMPL(stagnates());

}  // namespace
}  // namespace attncheck::impls::broken
