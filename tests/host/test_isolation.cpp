// Isolation (host/isolation.h): an isolated implementation
// computes exactly what it computes in-process (problems, strides, NaN
// payloads, layers and gradients cross the process boundary bit for bit);
// a crash, an exit, a hang or a throw in the child comes back as the right
// exception and the next call runs in a fresh child; a property run on a
// crashing implementation fails with a shrunk counterexample and a fixture.

#include <gtest/gtest.h>

#include <rapidcheck.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "host/isolation.h"
#include "attncheck/layer.h"
#include "host/plugin_loader.h"
#include "host/wire.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "run/run_property.h"
#include "attncheck/registry.h"
#include "attncheck/session.h"
#include "properties/gen/generators.h"

namespace attncheck {
namespace {

// The bits of doubles, so NaN payloads and signed zeros compare too.
std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(double));
  return out;
}

void expect_same(const ForwardResult& a, const ForwardResult& b) {
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(bits(a.out), bits(b.out));
  EXPECT_EQ(bits(a.weights), bits(b.weights));
  EXPECT_EQ(bits(a.lse), bits(b.lse));
}

// Generated problems of every feature, in every layout.
std::vector<Problem> sample_problems(const ImplInfo& info, int n) {
  rc::Random random(777);
  const auto g = gen::problem(gen::spec_for(info, DType::f64));
  std::vector<Problem> out;
  for (int k = 0; k < n; ++k) {
    rc::Random r = random.split();
    Problem p = g(r, k % 100).value();
    const auto layout = static_cast<gen::Layout>(k % 3);
    out.push_back(gen::with_layout(p, layout));
  }
  return out;
}

TEST(Isolation, ForwardAndBackwardCrossTheBoundaryBitForBit) {
  const auto impl = find_impl("loop_f64");
  ASSERT_TRUE(impl);
  const auto isolated = isolate(impl);
  // The same declaration (a copy: the worker is another process).
  EXPECT_EQ(isolated->info().name, impl->info().name);
  EXPECT_EQ(isolated->info().features, impl->info().features);
  EXPECT_EQ(isolated->info().dtypes, impl->info().dtypes);
  for (Problem p : sample_problems(impl->info(), 60)) {
    SCOPED_TRACE(fmt::format("tq {} tk {} dk {}", p.tq, p.tk, p.dk));
    expect_same(isolated->forward(p), impl->forward(p));
    if (impl->info().has(ATTNCHECK_FEATURE_BACKWARD) && !p.has_empty_rows()) {
      p.dout.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.5);
      const BackwardResult a = isolated->backward(p), b = impl->backward(p);
      EXPECT_EQ(a.status, b.status);
      EXPECT_EQ(bits(a.dq), bits(b.dq));
      EXPECT_EQ(bits(a.dk), bits(b.dk));
      EXPECT_EQ(bits(a.dv), bits(b.dv));
    }
  }
}

TEST(Isolation, ScoreElementCountsComeBack) {
  const auto impl = find_impl("local_f64");
  ASSERT_TRUE(impl);
  const auto isolated = isolate(impl);
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 8, 8, 2, 2);
  p.window_left = 1;
  p.window_right = 0;
  ASSERT_EQ(isolated->forward(p).status, Status::ok);
  impl->forward(p);
  ASSERT_TRUE(impl->score_elements_computed().has_value());
  EXPECT_EQ(isolated->score_elements_computed(), impl->score_elements_computed());
}

TEST(Isolation, ALayerStaysALayer) {
  const auto impl = find_impl("mha_f32");
  ASSERT_TRUE(impl);
  const auto isolated = isolate(impl);
  const auto* layer = dynamic_cast<const Layer*>(isolated.get());
  const auto* direct = dynamic_cast<const Layer*>(impl.get());
  ASSERT_TRUE(layer && direct);
  LayerWeights w;
  w.d_model = 4;
  for (auto* m : {&w.w_q, &w.w_k, &w.w_v, &w.w_o}) {
    m->assign(16, 0.0);
    for (int i = 0; i < 4; ++i) (*m)[static_cast<size_t>(i * 5)] = 1.0;
  }
  LayerInput x;
  x.heads = 2;
  x.tq = 3;
  x.tk = 3;
  for (int k = 0; k < 12; ++k) {
    x.x_q.push_back(0.25 * k - 1);
    x.x_kv.push_back(0.5 - 0.125 * k);
  }
  const LayerResult a = layer->run(w, x), b = direct->run(w, x);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(bits(a.y), bits(b.y));
  EXPECT_EQ(layer->parameter_count(8, 2), direct->parameter_count(8, 2));
  // A plain implementation is not made a layer.
  EXPECT_EQ(dynamic_cast<const Layer*>(isolate(find_impl("loop_f64")).get()), nullptr);
}

// Misbehaves when tk >= 3, else the loop reference's answer.
class Hostile : public Implementation {
 public:
  enum class Mode { segfault, exit, spin, block, throws, contract, quick };
  Hostile(Mode mode, std::string name) : mode_(mode), ref_(find_impl("loop_f64")) {
    info_ = ref_->info();
    info_.name = std::move(name);
    info_.kind = Kind::broken;
    info_.features &= ~ATTNCHECK_FEATURE_BACKWARD;
  }
  const ImplInfo& info() const override { return info_; }
  ForwardResult forward(const Problem& p) const override {
    if (p.tk >= 3) {
      switch (mode_) {
        case Mode::segfault: {
          volatile int* nowhere = nullptr;
          *nowhere = 1;
          break;
        }
        case Mode::exit:
          _exit(3);
        case Mode::spin: {
          volatile uint64_t n = 0;
          for (;;) n = n + 1;
        }
        case Mode::block:
          for (;;) ::pause();
        case Mode::throws:
          throw std::runtime_error("kernel table overflow");
        case Mode::contract:
          throw PluginContractError("wrote outside its output");
        case Mode::quick: {  // zeros at once, the inputs unread
          ForwardResult r;
          r.status = Status::ok;
          r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
          return r;
        }
      }
    }
    return ref_->forward(p);
  }

 private:
  Mode mode_;
  std::shared_ptr<const Implementation> ref_;
  ImplInfo info_;
};

Problem problem_with_keys(int64_t tk) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 2, tk, 2, 2);
  for (int64_t j = 0; j < tk; ++j) p.v.at(0, 0, j, 0) = static_cast<double>(j);
  return p;
}

// The message of the ImplementationDied a call on tk = 3 throws.
std::string death_of(const Implementation& isolated) {
  try {
    isolated.forward(problem_with_keys(3));
  } catch (const ImplementationDied& e) {
    return e.what();
  }
  return "(no ImplementationDied)";
}

// After the death, a fresh child answers the next call.
void expect_recovers(const Implementation& isolated) {
  const ForwardResult r = isolated.forward(problem_with_keys(2));
  ASSERT_EQ(r.status, Status::ok);
  EXPECT_EQ(r.out[0], 0.5);
}

TEST(Isolation, ACrashIsReportedAndTheNextCallRunsInAFreshChild) {
  const auto isolated = isolate(find_impl("hostile_segfault"));
  expect_recovers(*isolated);
  const std::string m = death_of(*isolated);
  // A sanitizer build's SEGV handler reports, then aborts or exits instead
  // of dying of the signal; either way the message says what happened
  // during forward.
  EXPECT_TRUE(m.find("crashed with signal 11 (SIGSEGV") != std::string::npos ||
              m.find("crashed with signal 6 (SIGABRT") != std::string::npos ||
              m.find("exited with status") != std::string::npos)
      << m;
  EXPECT_NE(m.find("during forward"), std::string::npos) << m;
  expect_recovers(*isolated);
  EXPECT_NE(death_of(*isolated), "(no ImplementationDied)");
  expect_recovers(*isolated);
}

TEST(Isolation, AnExitIsReported) {
  const auto isolated = isolate(find_impl("hostile_exit"));
  EXPECT_NE(death_of(*isolated).find("exited with status 3"), std::string::npos);
  expect_recovers(*isolated);
}

TEST(Isolation, ASpinningCallIsKilledAtTheCpuLimit) {
  const auto isolated = isolate(find_impl("hostile_spin"), {200});
  const std::string m = death_of(*isolated);
  EXPECT_NE(m.find("more than 200 ms of CPU time"), std::string::npos) << m;
  expect_recovers(*isolated);
}

TEST(Isolation, TheCpuLimitCountsFromTheDecodedRequest) {
  // A 128 MiB request costs the worker far more than 10 ms of CPU time to
  // read and decode on any machine (a socket copy, fresh pages, a copy
  // into the tensors; at real sizes seconds on some machines, which
  // failed correct kernels as hangs). An implementation that answers at
  // once is not charged for it.
  const auto isolated = isolate(find_impl("hostile_quick"), {10});
  const Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 32768, 256, 256);
  const ForwardResult r = isolated->forward(p);
  EXPECT_EQ(r.status, Status::ok);
  EXPECT_EQ(r.out.size(), 256u);
}

TEST(Isolation, ABlockedCallIsKilledAtTheWallLimit) {
  const auto isolated = isolate(find_impl("hostile_block"), {50});
  const std::string m = death_of(*isolated);
  EXPECT_NE(m.find("ms of wall time (over 10 x --timeout-ms)"), std::string::npos) << m;
  expect_recovers(*isolated);
}

TEST(Isolation, ExceptionsComeBackWithTheirMessageAndContractErrorsKeepTheirType) {
  const auto throws = isolate(find_impl("hostile_throws"));
  try {
    throws->forward(problem_with_keys(3));
    ADD_FAILURE() << "no exception";
  } catch (const ImplementationDied&) {
    ADD_FAILURE() << "a throw is not a death";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel table overflow");
  }
  const auto contract = isolate(find_impl("hostile_contract"));
  EXPECT_THROW(contract->forward(problem_with_keys(3)), PluginContractError);
  expect_recovers(*contract);
}

TEST(Isolation, ACrashingImplementationFailsThePropertyWithAShrunkCaseAndAFixture) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("attncheck-isolation-{}", ::getpid());
  RunConfig config;
  config.seed = kDefaultSeed;
  config.save_failures_dir = dir.string();
  const auto isolated = isolate(find_impl("hostile_segfault"));
  const PropertyOutcome o =
      run_property(*find_property("MatchesOracle"), *isolated, DType::f64, config);
  EXPECT_EQ(o.status, PropertyStatus::failed);
  EXPECT_NE(o.message.find("during forward"), std::string::npos) << o.message;
  ASSERT_TRUE(o.counterexample.has_value());
  EXPECT_EQ(o.counterexample->tk, 3);  // the smallest crashing case
  EXPECT_EQ(o.counterexample->tq, 1);
  ASSERT_TRUE(o.fixture.has_value());
  EXPECT_TRUE(std::filesystem::exists(*o.fixture));
  EXPECT_TRUE(o.diagnosis.empty());
  std::filesystem::remove_all(dir);
}

// The death budget of hangs (docs/isolation.md): the first property that
// hangs may hang 1 + kMaxHangsPerProperty times (shrinking), each later one
// once, and the run kMaxHangsPerRun times; past that the implementation is
// not called (its calls are UNSUPPORTED without reaching the worker).
TEST(Isolation, HangsAreBoundedPerPropertyAndPerRun) {
  const auto impl = isolate(find_impl("hostile_spin"), {50});
  const auto& isolated = dynamic_cast<const IsolatedImplementation&>(*impl);
  // Hangs a property run allows: calls on tk = 3 until one is not made.
  const auto hangs_of_a_property = [&] {
    isolated.begin_property();
    int hangs = 0;
    for (int k = 0; k < 2 * kMaxHangsPerRun; ++k) {
      try {
        if (impl->forward(problem_with_keys(3)).status == Status::unsupported) break;
      } catch (const ImplementationDied&) {
        ++hangs;
      }
    }
    return hangs;
  };
  int total = hangs_of_a_property();
  EXPECT_EQ(total, 1 + kMaxHangsPerProperty);
  EXPECT_TRUE(isolated.hung());
  while (!isolated.out_of_hangs() && total < 2 * kMaxHangsPerRun) {
    EXPECT_EQ(hangs_of_a_property(), 1 + kMaxHangsPerPropertyAfterAHang);
    total += 1 + kMaxHangsPerPropertyAfterAHang;
  }
  EXPECT_EQ(total, kMaxHangsPerRun);
  isolated.begin_property();
  EXPECT_EQ(impl->forward(problem_with_keys(2)).status, Status::unsupported);
}

// After a hang, the session runs the implementation's other properties,
// each hang failing the property it happens in; past the run's bound the
// remaining properties are not-run, and those it does not declare are
// skipped as without a hang.
TEST(Isolation, AfterAHangOtherPropertiesKeepTheirVerdictsWithinTheRunsBound) {
  SessionConfig config;
  config.impls = {isolate(find_impl("hostile_spin"), {50})};
  config.run.seed = kDefaultSeed;
  config.run.cases = 20;
  config.run.real_sizes = false;
  const PropertyDef* gradients = find_property_def("GradientsMatchOracle");  // no BACKWARD
  config.properties = {find_property("MatchesOracle"), gradients};
  // The same property again and again: more hanging runs than the bound.
  const PropertyDef* rows = find_property_def("RowSumsToOne");
  for (int k = 0; k < kMaxHangsPerRun; ++k) config.properties.push_back(rows);
  config.properties.push_back(gradients);
  const SessionResult result = run_session(config, {});
  ASSERT_EQ(result.outcomes.size(), config.properties.size());
  const auto& o = result.outcomes;
  EXPECT_EQ(o[0].status, PropertyStatus::failed);
  EXPECT_NE(o[0].message.find("more than 50 ms of CPU time"), std::string::npos) << o[0].message;
  EXPECT_EQ(o[1].status, PropertyStatus::skipped) << o[1].message;
  // The second hanging property has its own verdict and counterexample.
  EXPECT_EQ(o[2].status, PropertyStatus::failed);
  EXPECT_NE(o[2].message.find("more than 50 ms of CPU time"), std::string::npos) << o[2].message;
  EXPECT_EQ(o[2].message.find("not called"), std::string::npos) << o[2].message;
  ASSERT_TRUE(o[2].counterexample.has_value());
  EXPECT_GE(o[2].counterexample->tk, 3);
  int failed = 0, not_run = 0;
  for (size_t k = 2; k + 1 < o.size(); ++k) {
    if (o[k].status == PropertyStatus::failed) ++failed;
    if (o[k].status == PropertyStatus::not_run) {
      ++not_run;
      EXPECT_NE(o[k].message.find(fmt::format("hung {} times", kMaxHangsPerRun)), std::string::npos)
          << o[k].message;
    }
  }
  EXPECT_GT(not_run, 0);
  EXPECT_EQ(failed + not_run, kMaxHangsPerRun);
  EXPECT_EQ(o.back().status, PropertyStatus::skipped) << o.back().message;
  EXPECT_FALSE(result.interrupted);
}

// Registered at run time, after the built-ins' static registrars: a worker
// builds an isolated implementation by its registered name.
void register_hostile() {
  const std::pair<Hostile::Mode, const char*> modes[] = {
      {Hostile::Mode::segfault, "hostile_segfault"}, {Hostile::Mode::exit, "hostile_exit"},
      {Hostile::Mode::spin, "hostile_spin"},         {Hostile::Mode::block, "hostile_block"},
      {Hostile::Mode::throws, "hostile_throws"},     {Hostile::Mode::contract, "hostile_contract"},
      {Hostile::Mode::quick, "hostile_quick"}};
  for (const auto& [mode, name] : modes) register_impl(std::make_shared<Hostile>(mode, name));
}

}  // namespace
}  // namespace attncheck

// The test program is also the isolation's worker.
int main(int argc, char** argv) {
  attncheck::register_hostile();
  if (const auto code = attncheck::worker_main(argc, argv)) return *code;
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// A forward reply whose status is none of Status's values is malformed: a
// forged status never reaches the properties (since call ids, a plugin's
// forged frame is refused before its status is read; this is the check
// behind that one).
TEST(Wire, AStatusOutsideTheEnumIsMalformed) {
  using namespace attncheck::host_detail;
  for (const int32_t status : {0, 1, 2, 3, 7, -1}) {
    Writer w;
    w.put<int32_t>(status);
    w.put_str("");
    for (int i = 0; i < 3; ++i) w.put_vec(std::vector<double>{});
    w.put<int64_t>(-1);
    w.put<int32_t>(0);
    Reader r(w.bytes());
    std::optional<int64_t> score;
    if (status >= 0 && status <= 2) {
      EXPECT_NO_THROW(get_forward_result(r, score)) << status;
    } else {
      EXPECT_THROW(get_forward_result(r, score), WireError) << status;
    }
  }
}
