// Precision by stage and by path through the C ABI (SPEC 4.1, and 5.1's
// "later additions to version 2 only append"): a plugin built against the
// version 2 header as it was before the stages and paths were appended
// loads and means what it meant; a plugin declaring stages and paths is
// read into ImplInfo, at any struct_size from ours up; last_path sets
// ForwardResult::path, and an answer out of range fails the call. The
// refusals at load go through the command line in
// descriptor_refusals_test.sh; their finer points are here.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "attncheck/dtype.h"
#include "attncheck/properties.h"
#include "attncheck/registry.h"
#include "attncheck/run.h"
#include "host/abi_marshal.h"
#include "host/descriptor_validation.h"
#include "host/plugin_loader.h"
#include "host/wire.h"

namespace attncheck {
namespace {

const std::string kPluginDir = ATTNCHECK_TEST_PLUGIN_DIR;

std::string plugin_path(const std::string& target) { return kPluginDir + "/lib" + target + ".so"; }

// Every field of an ImplInfo but where it comes from, as the worker wire
// writes it (member by member, core/fields.h): equal bytes, equal
// declarations.
std::string declaration_bytes(ImplInfo info) {
  info.origin.clear();
  info.description.clear();
  host_detail::Writer w;
  host_detail::put_info(w, info);
  return w.bytes();
}

// The struct_size of descriptor 0 as the shared object at `path` exports it.
uint32_t exported_struct_size(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(handle, nullptr) << dlerror();
  if (!handle) return 0;
  using ListFn = const void* (*)(size_t*);
  ListFn list = nullptr;
  void* symbol = dlsym(handle, "attncheck_plugin_impls");
  std::memcpy(&list, &symbol, sizeof list);
  size_t count = 0;
  const auto* d = static_cast<const unsigned char*>(list(&count));
  uint32_t size = 0;
  std::memcpy(&size, d + offsetof(attncheck_impl, struct_size), sizeof size);
  dlclose(handle);
  return size;
}

Problem problem(int64_t tq, DType d = DType::f64) {
  Problem p = Problem::zeros(d, 1, 2, 1, tq, 5, 3, 2);
  double x = 0.125;
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& e : t->data) e = round_to(d, x = x * 1.75 > 4 ? x - 3.5 : x * 1.75);
  return p;
}

// ---- (a) the header before the stages: same loading, same meaning ----

TEST(PluginPaths, APluginBuiltAgainstTheFirstVersionTwoHeaderMeansWhatItMeant) {
  const std::string first = plugin_path("example_plugin_first_v2");
  // The frozen header's descriptor ends at combos.
  EXPECT_EQ(exported_struct_size(first), host_detail::kFirstV2ImplSize);
  EXPECT_EQ(exported_struct_size(plugin_path("attncheck_example_plugin")), sizeof(attncheck_impl));
  const auto old_build = load_plugin(first);
  const auto new_build = load_plugin(plugin_path("attncheck_example_plugin"));
  ASSERT_EQ(old_build.size(), new_build.size());
  for (size_t k = 0; k < old_build.size(); ++k) {
    const ImplInfo &a = old_build[k]->info(), &b = new_build[k]->info();
    EXPECT_FALSE(a.precision.has_stages()) << a.name;
    EXPECT_TRUE(a.paths.empty()) << a.name;
    EXPECT_EQ(declaration_bytes(a), declaration_bytes(b)) << a.name;
    // Judged the same: same seed, same cases, same budgets.
    RunConfig config;
    config.seed = 3;
    config.cases = 40;
    config.real_sizes = false;
    const DType d = a.combos.at(0).out;
    const PropertyOutcome x = run_property(*find_property("MatchesOracle"), *old_build[k], d, config);
    const PropertyOutcome y = run_property(*find_property("MatchesOracle"), *new_build[k], d, config);
    EXPECT_EQ(x.status, PropertyStatus::passed) << x.message;
    EXPECT_GT(x.cases, 0);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.cases, y.cases);
    EXPECT_EQ(x.discarded, y.discarded);
    EXPECT_EQ(x.max_budget_used, y.max_budget_used) << a.name;
    const ForwardResult r = old_build[k]->forward(problem(4, d));
    EXPECT_EQ(r.status, Status::ok) << r.error;
    EXPECT_EQ(r.path, -1);
  }
}

// A descriptor of the first version 2 layout made here: the bytes past it
// are garbage the loader must never read (it copies struct_size bytes into
// a zeroed descriptor; validation and reading look only where it reaches).
TEST(PluginPaths, FieldsPastStructSizeAreNotRead) {
  attncheck_impl d{};
  d.abi_version = ATTNCHECK_ABI_VERSION;
  d.name = "short_descriptor";
  d.dtypes = 1u << ATTNCHECK_F64;
  d.precision = {ATTNCHECK_F32, ATTNCHECK_F32, 0, 0, 0};
  d.s_cast = ATTNCHECK_F32;
  d.forward = [](void*, const attncheck_problem*, attncheck_outputs*) { return 0; };
  d.struct_size = host_detail::kFirstV2ImplSize;
  std::memset(&d.stages, 0xa5, sizeof d.stages);
  d.n_paths = 1000;
  d.paths = reinterpret_cast<const attncheck_path*>(&d);
  EXPECT_NO_THROW(validate_plugin_descriptor(d, 0, "libx.so"));
  const ImplInfo info = host_detail::declared_info(d, "libx.so");
  EXPECT_FALSE(info.precision.has_stages());
  EXPECT_TRUE(info.paths.empty());
  d.struct_size = host_detail::kFirstV2ImplSize - 8;
  try {
    validate_plugin_descriptor(d, 0, "libx.so");
    ADD_FAILURE() << "a struct_size below the first version 2 layout was taken";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "libx.so: descriptor 0: struct_size is 152, smaller than version 2's "
                 "attncheck_impl (160 bytes): set it to sizeof(attncheck_impl)");
  }
}

// ---- (b) stages and two paths ----

void expect_two_paths(const ImplInfo& info) {
  const PrecisionTraits& t = info.precision;
  EXPECT_EQ(t.accum, DType::f32);
  EXPECT_EQ(t.s_cast_format(), DType::bf16);
  EXPECT_EQ(t.exp_ulps, 4u);
  EXPECT_EQ(t.key_block, 16);
  EXPECT_TRUE(t.q_cast_kv);
  EXPECT_FALSE(t.q_cast);
  EXPECT_EQ(t.score_accum, DType::bf16);
  EXPECT_EQ(t.softmax_accum, DType::f32);
  EXPECT_EQ(t.pv_accum, DType::f16);
  EXPECT_EQ(t.ftz_formats, kFtzAccum | kFtzPvAccum);
  EXPECT_TRUE(t.flushes(kFtzPvAccum));
  EXPECT_FALSE(t.flushes(kFtzOut));
  ASSERT_EQ(info.paths.size(), 2u);
  const ImplPath &s = info.paths[0], &tiled = info.paths[1];
  EXPECT_EQ(s.name, "short");
  EXPECT_EQ(s.precision.accum, DType::f64);
  EXPECT_EQ(s.precision.score_accum, DType::f64);
  EXPECT_FALSE(s.precision.softmax_accum);  // bit clear: accum
  EXPECT_FALSE(s.precision.pv_accum);
  EXPECT_FALSE(s.precision.q_cast_format(DType::bf16));
  EXPECT_EQ(s.precision.ftz_formats, 0u);
  EXPECT_EQ(tiled.name, "tiled");
  EXPECT_EQ(tiled.precision.accum, DType::f32);
  EXPECT_EQ(tiled.precision.exp_ulps, 2u);
  EXPECT_EQ(tiled.precision.key_block, 64);
  EXPECT_EQ(tiled.precision.q_cast_format(DType::bf16), DType::bf16);
  EXPECT_EQ(tiled.precision.score_accum, DType::f32);
  EXPECT_FALSE(tiled.precision.softmax_accum);
  EXPECT_EQ(tiled.precision.pv_accum, DType::f32);
  // The descriptor is the loosest: the loader took it.
  EXPECT_EQ(tighter_component(t, s.precision), "");
  EXPECT_EQ(tighter_component(t, tiled.precision), "");
}

TEST(PluginPaths, StagesAndPathsAreRead) {
  const auto impls = load_plugin(plugin_path("plugin_staged_paths"));
  ASSERT_EQ(impls.size(), 3u);
  expect_two_paths(impls[0]->info());
  EXPECT_EQ(impls[2]->info().name, "says_no_path");
  EXPECT_FALSE(impls[2]->info().precision.has_stages());
  EXPECT_TRUE(impls[2]->info().paths.empty());
}

TEST(PluginPaths, ALaterHeadersLargerStructsAreReadAtTheirStride) {
  EXPECT_GT(exported_struct_size(plugin_path("plugin_staged_paths_newer")),
            sizeof(attncheck_impl));
  const auto newer = load_plugin(plugin_path("plugin_staged_paths_newer"));
  const auto ours = load_plugin(plugin_path("plugin_staged_paths"));
  ASSERT_EQ(newer.size(), ours.size());
  expect_two_paths(newer[0]->info());
  for (size_t k = 0; k < newer.size(); ++k)
    EXPECT_EQ(declaration_bytes(newer[k]->info()), declaration_bytes(ours[k]->info())) << k;
  EXPECT_EQ(newer[0]->forward(problem(5)).path, 1);
}

TEST(PluginPaths, LastPathSetsThePathOfEachCall) {
  const auto impls = load_plugin(plugin_path("plugin_staged_paths"));
  const Implementation& two = *impls[0];
  const auto loop = find_impl("loop_f64");
  ASSERT_TRUE(loop);
  for (int64_t tq : {1, 3, 4, 6, 2}) {
    const ForwardResult r = two.forward(problem(tq));
    ASSERT_EQ(r.status, Status::ok) << r.error;
    EXPECT_EQ(r.path, tq >= 4 ? 1 : 0) << "tq " << tq;
    EXPECT_EQ(&precision_of(two.info(), r.path), &two.info().paths[tq >= 4 ? 1 : 0].precision);
    const ForwardResult ref = loop->forward(problem(tq));
    ASSERT_EQ(r.out.size(), ref.out.size());
    for (size_t k = 0; k < r.out.size(); ++k) EXPECT_NEAR(r.out[k], ref.out[k], 1e-12);
  }
  // last_path without paths answers -1: not said.
  EXPECT_EQ(impls[2]->forward(problem(5)).path, -1);
}

// ---- (d) a last_path answer out of range is an error of that call ----

TEST(PluginPaths, ALastPathAnswerOutOfRangeFailsTheCall) {
  const auto impls = load_plugin(plugin_path("plugin_staged_paths"));
  const Implementation& bad = *impls[1];
  EXPECT_EQ(bad.forward(problem(2)).path, 0);
  try {
    bad.forward(problem(4));
    ADD_FAILURE() << "last_path answered 2 of 2 paths unnoticed";
  } catch (const PluginContractError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plugin implementation 'two_paths_bad_index' (" +
                  plugin_path("plugin_staged_paths") +
                  ") returned 2 from last_path, which is outside -1 .. 1 (the index into its 2 "
                  "paths of the path the latest forward took, -1 = not said)");
  }
  // Through a property: a failed case whose message says so.
  RunConfig config;
  config.cases = 30;
  config.real_sizes = false;
  const PropertyOutcome o = run_property(*find_property("MatchesOracle"), bad, DType::f64, config);
  EXPECT_EQ(o.status, PropertyStatus::failed);
  EXPECT_NE(o.message.find("returned 2 from last_path, which is outside -1 .. 1"),
            std::string::npos)
      << o.message;
}

// ---- (c) refusals: the finer points (every one is in the shell test) ----

attncheck_impl staged_descriptor(const attncheck_path* paths, uint32_t n) {
  attncheck_impl d{};
  d.abi_version = ATTNCHECK_ABI_VERSION;
  d.name = "staged";
  d.dtypes = 1u << ATTNCHECK_F64;
  d.precision = {ATTNCHECK_BF16, ATTNCHECK_BF16, 2, 0, 32};
  d.s_cast = ATTNCHECK_BF16;
  d.forward = [](void*, const attncheck_problem*, attncheck_outputs*) { return 0; };
  d.struct_size = sizeof d;
  d.n_paths = n;
  d.paths = paths;
  return d;
}

// The refusal of an E5M2 accumulation in stage `field` of descriptor 1.
std::string fmt_stage_e5m2(const std::string& field) {
  return "libx.so: descriptor 1 (name 'staged'): stages." + field +
         " 5 is e5m2, an input format only (this field takes f64, f32, bf16 or f16)";
}

std::string rejection(const attncheck_impl& d) {
  try {
    validate_plugin_descriptor(d, 1, "libx.so");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

attncheck_path path(const char* name, uint32_t accum) {
  attncheck_path p{};
  p.struct_size = sizeof p;
  p.name = name;
  p.precision = {accum, accum, 0, 0, 0};
  p.s_cast = accum;
  return p;
}

TEST(PluginPaths, ADescriptorTighterThanAPathIsRefusedInEachComponent) {
  attncheck_path paths[] = {path("a", ATTNCHECK_F32), path("b", ATTNCHECK_F16)};
  attncheck_impl d = staged_descriptor(paths, 2);
  EXPECT_EQ(rejection(d), "");
  const std::string at = "libx.so: descriptor 1 (name 'staged'): paths[1] (path 'b'): the "
                         "descriptor's own precision is tighter than this path's (";
  const auto refused_for = [&](const std::string& component) {
    const std::string e = rejection(d);
    EXPECT_EQ(e.rfind(at, 0), 0u) << e;
    EXPECT_NE(e.find(component), std::string::npos) << e;
    EXPECT_NE(e.find("older harnesses, judge by the descriptor alone"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  };
  // A format refused in a path as in the descriptor.
  paths[1].stages = {ATTNCHECK_STAGE_PV_ACCUM, 0, 0, 0, ATTNCHECK_E4M3};
  EXPECT_NE(rejection(d).find("paths[1] (path 'b'): stages.pv_accum 4 is e4m3"),
            std::string::npos)
      << rejection(d);
  // A stage: the descriptor's q.k sums in f32, path b's in bf16.
  paths[1].stages = {ATTNCHECK_STAGE_SCORE_ACCUM, 0, ATTNCHECK_BF16, 0, 0};
  d.stages = {ATTNCHECK_STAGE_SCORE_ACCUM, 0, ATTNCHECK_F32, 0, 0};
  refused_for("score_accum f32 is tighter than bf16");
  d.stages = {ATTNCHECK_STAGE_SCORE_ACCUM, 0, ATTNCHECK_BF16, 0, 0};
  EXPECT_EQ(rejection(d), "");
  // Q rounded by the path, not by the descriptor.
  paths[1].stages.set |= ATTNCHECK_STAGE_Q_CAST;
  paths[1].stages.q_cast = ATTNCHECK_F16;
  refused_for("q_cast none is tighter than f16");
  d.stages.set |= ATTNCHECK_STAGE_Q_CAST;
  d.stages.q_cast = ATTNCHECK_Q_CAST_KV;  // not looser when K/V are f64 or f32
  refused_for("q_cast");
  d.stages.q_cast = ATTNCHECK_BF16;
  EXPECT_EQ(rejection(d), "");
  // exp_ulps, rescales, flushing formats.
  paths[1].precision.exp_ulps = 3;
  refused_for("exp_ulps 2 is fewer than 3");
  paths[1].precision.exp_ulps = 2;
  paths[1].precision.key_block = 16;
  refused_for("key_block 32 makes fewer rescales than 16");
  paths[1].precision.key_block = 64;
  EXPECT_EQ(rejection(d), "");
  paths[1].ftz_formats = ATTNCHECK_FTZ_OUT;
  refused_for("out does not flush where the other does");
  d.ftz_formats = ATTNCHECK_FTZ_OUT;
  EXPECT_EQ(rejection(d), "");
}

TEST(PluginPaths, PathsAreReadAtTheirOwnStride) {
  // A later header's attncheck_path: ours, then a field this harness does
  // not know.
  struct LaterPath {
    attncheck_path p;
    uint64_t later;
  };
  LaterPath paths[2] = {{path("a", ATTNCHECK_F32), ~0ull}, {path("b", ATTNCHECK_F16), ~0ull}};
  for (LaterPath& p : paths) p.p.struct_size = sizeof(LaterPath);
  paths[1].p.precision.exp_ulps = 1;
  attncheck_impl d = staged_descriptor(&paths[0].p, 2);
  EXPECT_EQ(rejection(d), "");
  const ImplInfo info = host_detail::declared_info(d, "libx.so");
  ASSERT_EQ(info.paths.size(), 2u);
  EXPECT_EQ(info.paths[1].name, "b");
  EXPECT_EQ(info.paths[1].precision.accum, DType::f16);
  EXPECT_EQ(info.paths[1].precision.exp_ulps, 1u);
  paths[1].p.struct_size = sizeof(attncheck_path);
  EXPECT_NE(rejection(d).find("paths[1].struct_size is 72, but paths[0]'s is 80 (the array "
                              "stride)"),
            std::string::npos)
      << rejection(d);
  paths[0].p.struct_size = host_detail::kMaxStructSize + 1;
  EXPECT_NE(rejection(d).find("paths[0]: implausible struct_size 4097"), std::string::npos)
      << rejection(d);
}

TEST(PluginPaths, QCastTakesAFloatFormatOrTheKvFormat) {
  attncheck_impl d = staged_descriptor(nullptr, 0);
  d.stages.set = ATTNCHECK_STAGE_Q_CAST;
  for (uint32_t code : {ATTNCHECK_F64, ATTNCHECK_F32, ATTNCHECK_BF16, ATTNCHECK_F16,
                        ATTNCHECK_E4M3, ATTNCHECK_E5M2, ATTNCHECK_Q_CAST_KV}) {
    d.stages.q_cast = code;
    EXPECT_EQ(rejection(d), "") << code;
  }
  d.stages.q_cast = ATTNCHECK_E5M2;
  EXPECT_EQ(host_detail::declared_info(d, "x").precision.q_cast, DType::e5m2);
  // A clear bit: the field is not read.
  d.stages = {0, 99, 99, 99, 99};
  EXPECT_EQ(rejection(d), "");
  EXPECT_FALSE(host_detail::declared_info(d, "x").precision.has_stages());
  // The E5M2 accumulations, each named.
  for (const auto& [bit, field] :
       {std::pair{ATTNCHECK_STAGE_SCORE_ACCUM, "score_accum"},
        std::pair{ATTNCHECK_STAGE_SOFTMAX_ACCUM, "softmax_accum"},
        std::pair{ATTNCHECK_STAGE_PV_ACCUM, "pv_accum"}}) {
    d.stages = {bit, ATTNCHECK_E5M2, ATTNCHECK_E5M2, ATTNCHECK_E5M2, ATTNCHECK_E5M2};
    EXPECT_EQ(rejection(d), fmt_stage_e5m2(field));
  }
}

}  // namespace
}  // namespace attncheck
