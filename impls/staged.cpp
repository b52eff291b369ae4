// Kernels whose stages compute in formats of their own, declared by stage
// and by path (SPEC 4.1): each passes only with the stage terms that
// describe it, and each is correct.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/registry.h"
#include "impl_common.h"
#include "staged_kernel.h"

namespace attncheck::impls {
namespace {

// The formats llama.cpp runs: Q and the output in f32, K and V in f16.
const std::vector<DTypeCombo> kF16Cache = {{DType::f32, DType::f16, DType::f32}};

std::shared_ptr<const Implementation> make(std::string name, const StagedArithmetic& a,
                                           std::string description,
                                           std::vector<DTypeCombo> combos = {}) {
  ImplInfo info = reference_info(std::move(name), DType::f32,
                                 kOnlineFeatures & ~ATTNCHECK_FEATURE_STRIDES,
                                 EmptyRowPolicy::error, std::move(description));
  info.precision = staged_precision(a);
  if (!combos.empty()) {
    info.combos = std::move(combos);
    info.dtypes = 0;
  }
  return std::make_shared<FunctionImpl>(std::move(info),
                                        [a](const Problem& p) { return staged_forward(p, a); });
}

// f32 scores and softmax, the unnormalised P.V sum kept in an f16
// accumulator for runs of 64 keys, each run added into an f32 total.
StagedArithmetic pv_f16_runs() {
  StagedArithmetic a;
  a.pv = DType::f16;
  a.pv_run = 64;
  return a;
}

ATTNCHECK_REGISTER_IMPL(make("staged_pv_f16", pv_f16_runs(),
                             "online softmax in f32 with an f16 P.V accumulator over runs of 64 "
                             "keys joined in f32, K/V in f16; declared by stage (pv_accum f16)",
                             kF16Cache));

StagedArithmetic q_f16() {
  StagedArithmetic a;
  a.q_cast = DType::f16;
  return a;
}

ATTNCHECK_REGISTER_IMPL(make("staged_q_f16", q_f16(),
                             "Q rounded to f16 before q.k (as ggml rounds it to K's format), "
                             "K/V in f16, the rest in f32; declared by stage (q_cast f16)",
                             kF16Cache));

// bf16 sums over runs of 16 products, joined in f32: one bf16 sum over
// all of a 234-dim head errs by 0.25 in a score of 4.7, more than the
// plain algorithm's accuracy allows (AsAccurateAsBaseline caught it,
// thorough profile, seed 2).
StagedArithmetic qk_bf16() {
  StagedArithmetic a;
  a.score = DType::bf16;
  a.score_run = 16;
  return a;
}

ATTNCHECK_REGISTER_IMPL(make("staged_qk_bf16", qk_bf16(),
                             "q.k summed in bf16 over runs of 16 products joined in f32 (every "
                             "product and sum rounded), the softmax and P.V in f32; declared by "
                             "stage (score_accum bf16)"));

// Two paths, as kernels dispatch: fewer than 16 queries take a loop with
// an f16 P.V accumulator, from 16 a kernel all in f32. Each call says
// which it took.
class TwoPath : public Implementation {
 public:
  TwoPath() {
    info_ = reference_info("two_path_f32", DType::f32,
                           kOnlineFeatures & ~ATTNCHECK_FEATURE_STRIDES, EmptyRowPolicy::error,
                           "dispatches: under 16 queries an f16 P.V accumulator (path short), "
                           "from 16 all f32 (path tiled); reports its path");
    info_.paths = {{"short", staged_precision(pv_f16_runs())},
                   {"tiled", staged_precision(StagedArithmetic{})}};
    info_.precision = info_.paths[0].precision;  // the looser: sound for both
    info_.combos = kF16Cache;
    info_.dtypes = 0;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    const bool tiled = p.tq >= 16;
    ForwardResult r = staged_forward(p, tiled ? StagedArithmetic{} : pv_f16_runs());
    r.path = tiled ? 1 : 0;
    return r;
  }

 private:
  ImplInfo info_;
};

ATTNCHECK_REGISTER_IMPL(std::make_shared<TwoPath>());

}  // namespace
}  // namespace attncheck::impls
