// The plugin loader (host/plugin_loader.h): descriptor
// validation, the load errors of real shared objects, and what a plugin
// implementation's calls hand over and check (strides, guards, sentinels,
// return codes), with descriptors made here.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "attncheck/registry.h"

namespace attncheck {
namespace {

const std::string kPluginDir = ATTNCHECK_TEST_PLUGIN_DIR;

std::string plugin_path(const std::string& target) { return kPluginDir + "/lib" + target + ".so"; }

// The InputError message of loading `path`, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    load_plugins({path});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// ---- descriptors made in-process ----

// Element access in the C ABI's dtypes, for the descriptors below.
double read_element(uint32_t dtype, const void* base, int64_t offset) {
  const auto* bytes = static_cast<const unsigned char*>(base);
  switch (dtype) {
    case ATTNCHECK_F64: {
      double x;
      std::memcpy(&x, bytes + 8 * offset, 8);
      return x;
    }
    case ATTNCHECK_F32: {
      float x;
      std::memcpy(&x, bytes + 4 * offset, 4);
      return x;
    }
    default: {
      uint16_t u;
      std::memcpy(&u, bytes + 2 * offset, 2);
      return dtype == ATTNCHECK_BF16 ? bf16_value(u) : f16_value(u);
    }
  }
}

void write_element(uint32_t dtype, void* base, int64_t offset, double x) {
  auto* bytes = static_cast<unsigned char*>(base);
  switch (dtype) {
    case ATTNCHECK_F64:
      std::memcpy(bytes + 8 * offset, &x, 8);
      return;
    case ATTNCHECK_F32: {
      const auto f = static_cast<float>(x);
      std::memcpy(bytes + 4 * offset, &f, 4);
      return;
    }
    default: {
      const uint16_t u = dtype == ATTNCHECK_BF16 ? bf16_bits(x) : f16_bits(x);
      std::memcpy(bytes + 2 * offset, &u, 2);
    }
  }
}

int64_t at(const int64_t* s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

// What the last call saw.
attncheck_problem last_problem;
attncheck_outputs last_outputs;
// What the descriptors below do beyond copying.
enum class Misdeed {
  none,
  write_past_out,
  write_before_weights,
  write_into_gap,
  skip_last,
  bad_code,
  long_error,
  error,
  unsupported
};
Misdeed misdeed = Misdeed::none;

// out[b, h, i, d] = v[b, kv_head(h), min(i, tk - 1), d], read and written in
// the problem's dtype through the strides given: the values must come back
// exactly. Weights 1 at that key, lse = 0.
int copy_forward(void*, const attncheck_problem* p, attncheck_outputs* o) {
  last_problem = *p;
  last_outputs = *o;
  if (misdeed == Misdeed::bad_code) return 7;
  if (misdeed == Misdeed::unsupported) return ATTNCHECK_UNSUPPORTED;
  if (misdeed == Misdeed::error || misdeed == Misdeed::long_error) {
    std::memset(o->error, 'x', sizeof o->error);  // no terminating NUL
    if (misdeed == Misdeed::error) std::strcpy(o->error, "no luck\nhere");
    return ATTNCHECK_ERROR;
  }
  const int64_t group = p->heads / p->kv_heads;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h)
      for (int64_t i = 0; i < p->tq; ++i) {
        const int64_t j = std::min(i, p->tk - 1);
        for (int64_t d = 0; d < p->dv; ++d) {
          if (misdeed == Misdeed::skip_last && b == p->batch - 1 && h == p->heads - 1 &&
              i == p->tq - 1 && d == p->dv - 1) {
            continue;
          }
          write_element(p->dtype, o->out, at(o->out_strides, b, h, i, d),
                        read_element(p->dtype, p->v, at(p->v_strides, b, h / group, j, d)));
        }
        const int64_t row = (b * p->heads + h) * p->tq + i;
        if (o->weights)
          for (int64_t k = 0; k < p->tk; ++k) o->weights[row * p->tk + k] = k == j ? 1 : 0;
        if (o->lse) o->lse[row] = 0;
      }
  if (misdeed == Misdeed::write_past_out) {
    const int64_t last = at(o->out_strides, p->batch - 1, p->heads - 1, p->tq - 1, p->dv - 1);
    write_element(p->dtype, o->out, last + 1 + 63, 0.0);
  }
  if (misdeed == Misdeed::write_before_weights) o->weights[-1] = 0;
  if (misdeed == Misdeed::write_into_gap) write_element(p->dtype, o->out, p->dv, 0.0);
  return ATTNCHECK_OK;
}

// dq = q, dk = k, dv = v (contiguous), or dv left unwritten.
int copy_backward(void*, const attncheck_problem* p, attncheck_grads* g, attncheck_outputs*) {
  const auto copy = [&](const void* src, const int64_t* s, void* dst, int64_t n0, int64_t n1,
                        int64_t n2, int64_t n3) {
    int64_t k = 0;
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b)
        for (int64_t c = 0; c < n2; ++c)
          for (int64_t d = 0; d < n3; ++d)
            write_element(p->dtype, dst, k++, read_element(p->dtype, src, at(s, a, b, c, d)));
  };
  copy(p->q, p->q_strides, g->dq, p->batch, p->heads, p->tq, p->dk);
  copy(p->k, p->k_strides, g->dk, p->batch, p->kv_heads, p->tk, p->dk);
  if (misdeed != Misdeed::skip_last)
    copy(p->v, p->v_strides, g->dv, p->batch, p->kv_heads, p->tk, p->dv);
  return ATTNCHECK_OK;
}

attncheck_impl descriptor(uint32_t features) {
  attncheck_impl d{};
  d.abi_version = ATTNCHECK_ABI_VERSION;
  d.name = "copy";
  d.dtypes = 0xf;
  d.features = features;
  d.empty_rows = ATTNCHECK_EMPTY_ROW_ERROR;
  d.precision = {ATTNCHECK_F64, ATTNCHECK_F64, 0, 0, 0};
  d.forward = copy_forward;
  d.backward = copy_backward;
  d.struct_size = sizeof(attncheck_impl);
  d.s_cast = ATTNCHECK_F64;
  return d;
}

// The version 1 call: what it saw, then copy_forward on the same fields
// (version 2 only appends, so the version 1 struct is a prefix).
uint32_t last_v1_abi_version = 0;
int v1_calls = 0;
int copy_forward_v1(void* ctx, const attncheck_v1_problem* p, attncheck_v1_outputs* o) {
  ++v1_calls;
  last_v1_abi_version = p->abi_version;
  attncheck_problem c{};
  std::memcpy(&c, p, sizeof *p);
  attncheck_outputs co;
  static_assert(sizeof co == sizeof *o);
  std::memcpy(&co, o, sizeof co);
  const int code = copy_forward(ctx, &c, &co);
  std::memcpy(o->error, co.error, sizeof o->error);
  return code;
}

attncheck_v1_impl descriptor_v1(uint32_t features) {
  attncheck_v1_impl d{};
  d.abi_version = ATTNCHECK_V1_ABI_VERSION;
  d.name = "copy_v1";
  d.dtypes = 0xf;
  d.features = features;
  d.empty_rows = ATTNCHECK_EMPTY_ROW_ERROR;
  d.precision = {ATTNCHECK_F32, ATTNCHECK_BF16, 0, 1, 0};
  d.forward = copy_forward_v1;
  return d;
}

template <typename Descriptor>
std::string rejection(const Descriptor& d) {
  try {
    validate_plugin_descriptor(d, 3, "libx.so");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginDescriptor, EachDefectIsOneLineNamingFileDescriptorAndField) {
  EXPECT_EQ(rejection(descriptor(0)), "");
  auto d = descriptor(0);
  d.abi_version = 3;
  EXPECT_EQ(rejection(d).rfind("libx.so: descriptor 3: abi_version is 3, but this attncheck "
                               "speaks ATTNCHECK_ABI_VERSION 1 and 2",
                               0),
            0u)
      << rejection(d);
  d = descriptor(0);
  d.name = nullptr;
  EXPECT_EQ(rejection(d), "libx.so: descriptor 3: name is NULL");
  d.name = "Has Space";
  EXPECT_NE(rejection(d).find("'Has Space' is not of the form [a-z0-9_.-]+"), std::string::npos);
  // A name with a line break and an ESC stays one line, escaped.
  d.name = "two\nlines\x1b[31m";
  EXPECT_NE(rejection(d).find("'two\\nlines\\x1b[31m' is not of the form"), std::string::npos)
      << rejection(d);
  EXPECT_EQ(rejection(d).find('\n'), std::string::npos);
  d = descriptor(0);
  d.features = ATTNCHECK_FEATURE_CAUSAL | 0x80000u;
  EXPECT_EQ(rejection(d), "libx.so: descriptor 3 (name 'copy'): unknown feature bits 0x80000");
  d = descriptor(0);
  d.dtypes = 0;
  EXPECT_NE(rejection(d).find("declares no dtype"), std::string::npos);
  d.dtypes = 0x21;
  EXPECT_NE(rejection(d).find("unknown dtype bits 0x20"), std::string::npos);
  d = descriptor(0);
  d.forward = nullptr;
  EXPECT_NE(rejection(d).find("forward is NULL"), std::string::npos);
  d = descriptor(ATTNCHECK_FEATURE_BACKWARD);
  d.backward = nullptr;
  EXPECT_NE(rejection(d).find("backward is NULL"), std::string::npos);
  d = descriptor(0);
  d.empty_rows = 2;
  EXPECT_NE(rejection(d).find("unknown empty_rows policy 2"), std::string::npos);
  d = descriptor(0);
  d.precision.accum = 9;
  EXPECT_NE(rejection(d).find("precision.accum 9 is no dtype"), std::string::npos);
  // 6 is Q8_0 (SPEC 1.2): a K/V format, never an accumulation.
  d.precision.accum = ATTNCHECK_Q8_0;
  EXPECT_NE(rejection(d).find("precision.accum 6 is q8_0, a block format for K/V only"),
            std::string::npos)
      << rejection(d);
  d.precision.accum = ATTNCHECK_E4M3;
  EXPECT_NE(rejection(d).find("precision.accum 4 is e4m3, an input format only"),
            std::string::npos)
      << rejection(d);
  d = descriptor(0);
  d.limits.max_tk = -1;
  EXPECT_NE(rejection(d).find("limits.max_tk is negative"), std::string::npos);
  d = descriptor(0);
  d.limits.dk_min = 8;
  d.limits.dk_max = 4;
  EXPECT_NE(rejection(d).find("limits.dk_min 8 exceeds limits.dk_max 4"), std::string::npos);
}

TEST(PluginDescriptor, VersionTwoFieldsAreChecked) {
  auto d = descriptor(ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_DESCALE);
  EXPECT_EQ(rejection(d), "");
  d.struct_size = sizeof(attncheck_v1_impl);
  EXPECT_EQ(rejection(d), "libx.so: descriptor 3: struct_size is 136, smaller than version 2's "
                          "attncheck_impl (160 bytes): set it to sizeof(attncheck_impl)");
  d = descriptor(0);
  d.abi_version = 1;
  EXPECT_EQ(rejection(d),
            "libx.so: descriptor 3: abi_version is 1, but the descriptor was read as version 2");
  d = descriptor(0);
  d.s_cast = ATTNCHECK_E5M2;
  EXPECT_NE(rejection(d).find("s_cast 5 is e5m2, an input format only"), std::string::npos);
  d = descriptor(0);
  d.ftz_formats = ATTNCHECK_FTZ_PV_ACCUM;  // known since precision by stage
  EXPECT_EQ(rejection(d), "");
  d.ftz_formats = 16 | ATTNCHECK_FTZ_PV_ACCUM;
  EXPECT_NE(rejection(d).find("unknown ftz_formats bits 0x10"), std::string::npos);
  const attncheck_dtype_combo combos[] = {{ATTNCHECK_BF16, ATTNCHECK_BF16, ATTNCHECK_BF16},
                                          {ATTNCHECK_E4M3, ATTNCHECK_E5M2, ATTNCHECK_BF16},
                                          {ATTNCHECK_E4M3, 9, ATTNCHECK_F32},
                                          {ATTNCHECK_F32, ATTNCHECK_F32, ATTNCHECK_E4M3}};
  d = descriptor(0);
  d.combos = combos;
  d.n_combos = 2;
  EXPECT_NE(rejection(d).find("dtypes 0xf does not match combos"), std::string::npos);
  d.dtypes = 1u << ATTNCHECK_BF16;  // exactly the uniform combinations
  EXPECT_EQ(rejection(d), "");
  d.dtypes = 0;  // or none: the combinations are the declaration
  EXPECT_EQ(rejection(d), "");
  d.n_combos = 3;
  EXPECT_EQ(rejection(d), "libx.so: descriptor 3 (name 'copy'): combos[2].kv_dtype 9 is no dtype");
  d.combos = combos + 3;  // {f32, f32, e4m3}: fp8 is never an output
  d.n_combos = 1;
  EXPECT_NE(rejection(d).find("combos[0].out_dtype 4 is e4m3, an input format only"),
            std::string::npos)
      << rejection(d);
  d.combos = nullptr;
  EXPECT_NE(rejection(d).find("n_combos is 1 but combos is NULL"), std::string::npos);
}

// SPEC 4: E4M3 enters u_p and eta_p like any other format when P (or S)
// is cast to it; E5M2 (u = 2^-3, past the first-order limit) is refused as
// p_cast or s_cast at load, and fp8 stays refused as an accumulation or
// an output (E4M3 was once refused as p_cast and s_cast too).
TEST(PluginDescriptor, E4M3IsAPCastAndSCastButE5M2IsNot) {
  auto d = descriptor(0);
  d.precision = {ATTNCHECK_F32, ATTNCHECK_E4M3, 0, 0, 0};
  EXPECT_EQ(rejection(d), "");
  d.s_cast = ATTNCHECK_E4M3;
  EXPECT_EQ(rejection(d), "");
  const ImplInfo info = make_plugin_impl(d, "test")->info();
  EXPECT_EQ(info.precision.p_cast, DType::e4m3);
  EXPECT_EQ(info.precision.s_cast_format(), DType::e4m3);

  d = descriptor(0);
  d.precision.p_cast = ATTNCHECK_E5M2;
  const std::string e = rejection(d);
  EXPECT_EQ(e.rfind("libx.so: descriptor 3 (name 'copy'): precision.p_cast 5 is e5m2", 0), 0u) << e;
  EXPECT_NE(e.find("first-order limit"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  d = descriptor(0);
  d.s_cast = ATTNCHECK_E5M2;
  EXPECT_NE(rejection(d).find("s_cast 5 is e5m2"), std::string::npos);
  for (uint32_t fp8 : {ATTNCHECK_E4M3, ATTNCHECK_E5M2}) {
    d = descriptor(0);
    d.precision.accum = fp8;
    EXPECT_NE(rejection(d).find("an input format only (this field takes f64, f32, bf16 or f16)"),
              std::string::npos)
        << rejection(d);
  }
  // A version 1 descriptor knows no fp8 at all.
  auto v1 = descriptor_v1(0);
  v1.precision.p_cast = ATTNCHECK_E4M3;
  EXPECT_NE(rejection(v1).find("precision.p_cast 4 is no dtype"), std::string::npos);
}

TEST(PluginDescriptor, VersionOneKnowsOnlyItsOwnBitsAndFormats) {
  auto d = descriptor_v1(0);
  EXPECT_EQ(rejection(d), "");
  d.features = ATTNCHECK_FEATURE_SINK;  // bit 15: unknown to version 1
  EXPECT_EQ(rejection(d), "libx.so: descriptor 3 (name 'copy_v1'): unknown feature bits 0x8000");
  d = descriptor_v1(0);
  d.precision.accum = ATTNCHECK_E4M3;
  EXPECT_NE(rejection(d).find("precision.accum 4 is no dtype"), std::string::npos);
  d = descriptor_v1(0);
  d.abi_version = 2;
  EXPECT_EQ(rejection(d),
            "libx.so: descriptor 3: abi_version is 2, but the descriptor was read as version 1");
}

TEST(PluginDescriptor, VersionOneIsWidenedToTheVersionTwoModel) {
  const ImplInfo v1 = make_plugin_impl(descriptor_v1(0), "test")->info();
  EXPECT_EQ(v1.precision.s_cast_format(), DType::f32);  // = accum
  EXPECT_EQ(v1.precision.ftz_formats, kFtzAccum | kFtzPCast | kFtzOut);
  EXPECT_TRUE(v1.precision.flushes(kFtzPCast));
  EXPECT_EQ(v1.combos.size(), 4u);
  EXPECT_TRUE(v1.supports(DTypeCombo{DType::bf16, DType::bf16, DType::bf16}));
  EXPECT_FALSE(v1.supports(DTypeCombo{DType::e4m3, DType::e4m3, DType::bf16}));
  EXPECT_EQ(v1.dtypes, 0xfu);

  auto d = descriptor(0);
  d.precision.flush_to_zero = 1;
  d.ftz_formats = ATTNCHECK_FTZ_OUT;  // speaks instead of flush_to_zero
  d.s_cast = ATTNCHECK_BF16;
  const attncheck_dtype_combo combos[] = {{ATTNCHECK_E4M3, ATTNCHECK_E4M3, ATTNCHECK_BF16}};
  d.combos = combos;
  d.n_combos = 1;
  d.dtypes = 0;
  const ImplInfo v2 = make_plugin_impl(d, "test")->info();
  EXPECT_EQ(v2.precision.s_cast_format(), DType::bf16);
  EXPECT_FALSE(v2.precision.flushes(kFtzAccum));
  EXPECT_TRUE(v2.precision.flushes(kFtzOut));
  EXPECT_EQ(v2.combos, (std::vector<DTypeCombo>{{DType::e4m3, DType::e4m3, DType::bf16}}));
  EXPECT_EQ(v2.dtypes, 0u);  // no {d, d, d}: the version 1 generators pass it by
}

// A 2 x 2 heads (GQA groups of 2) problem with every input feature set.
Problem busy_problem(DType dtype) {
  Problem p = Problem::zeros(dtype, 2, 2, 1, 3, 4, 2, 3);
  double x = 0.25;
  for (Tensor* t : {&p.q, &p.k, &p.v})
    for (double& e : t->data) e = round_to(dtype, x += 0.375);
  p.key_valid = {1, 1, 0, 1, 1, 0, 1, 1};
  p.mask = Broadcast<uint8_t>{1, 2, std::vector<uint8_t>(2 * 3 * 4, 1)};
  p.bias = Broadcast<double>{2, 1, std::vector<double>(2 * 3 * 4, 0.5)};
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 2;
  p.scale = 0.5;
  return p;
}

// p with q, k and v in a padded layout: a gap after every row and head,
// holding NaN, as the generators' padded layout does.
Problem padded(const Problem& p) {
  Problem c = p;
  const auto pad = [](const Tensor& t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    Tensor out;
    out.strides = {n1 * (n2 * (n3 + 1) + 1), n2 * (n3 + 1) + 1, n3 + 1, 1};
    out.data.assign(static_cast<size_t>(n0 * out.strides[0]), std::nan(""));
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b)
        for (int64_t i = 0; i < n2; ++i)
          for (int64_t d = 0; d < n3; ++d) out.at(a, b, i, d) = t.at(a, b, i, d);
    return out;
  };
  c.q = pad(p.q, p.batch, p.heads, p.tq, p.dk);
  c.k = pad(p.k, p.batch, p.kv_heads, p.tk, p.dk);
  c.v = pad(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  return c;
}

std::vector<double> expected_copy(const Problem& p) {
  std::vector<double> out;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d)
          out.push_back(p.v.at(b, p.kv_head(h), std::min(i, p.tk - 1), d));
  return out;
}

class PluginCall : public ::testing::Test {
 protected:
  void SetUp() override { misdeed = Misdeed::none; }
  void TearDown() override { misdeed = Misdeed::none; }
};

TEST_F(PluginCall, ValuesTravelExactlyInEveryDtype) {
  const auto impl = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA), "test");
  EXPECT_EQ(impl->info().kind, Kind::plugin);
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    const Problem p = busy_problem(d);
    const ForwardResult r = impl->forward(p);
    ASSERT_EQ(r.status, Status::ok) << dtype_name(d);
    EXPECT_EQ(r.out, expected_copy(p)) << dtype_name(d);
    EXPECT_TRUE(r.weights.empty());
    EXPECT_TRUE(r.lse.empty());
    EXPECT_EQ(last_problem.dtype, static_cast<uint32_t>(d));
  }
}

TEST_F(PluginCall, TheProblemArrivesFieldForField) {
  const auto impl = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_WEIGHTS), "test");
  const Problem p = busy_problem(DType::f64);
  ASSERT_EQ(impl->forward(p).status, Status::ok);
  const attncheck_problem& c = last_problem;
  EXPECT_EQ(c.abi_version, ATTNCHECK_ABI_VERSION);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.tk, 4);
  EXPECT_EQ(c.dv, 3);
  EXPECT_EQ(c.causal, 1u);
  EXPECT_EQ(c.align, ATTNCHECK_ALIGN_BOTTOM_RIGHT);
  EXPECT_EQ(c.window_left, 2);
  EXPECT_EQ(c.window_right, -1);
  EXPECT_EQ(c.scale, 0.5);
  EXPECT_EQ(c.softcap, 0.0);
  // Version 2's fields say "version 1 problem".
  EXPECT_EQ(c.q_dtype, ATTNCHECK_F64);
  EXPECT_EQ(c.kv_dtype, ATTNCHECK_F64);
  EXPECT_EQ(c.q_descale, 1.0);
  EXPECT_EQ(c.v_descale, 1.0);
  EXPECT_EQ(c.sink, nullptr);
  EXPECT_EQ(c.cu_seqlens_q, nullptr);
  EXPECT_EQ(c.block_table, nullptr);
  // A mask of batch 1 broadcasts over batch, a bias of heads 1 over heads.
  EXPECT_EQ(std::vector<int64_t>(c.mask_strides, c.mask_strides + 4),
            (std::vector<int64_t>{0, 12, 4, 1}));
  EXPECT_EQ(std::vector<int64_t>(c.bias_strides, c.bias_strides + 4),
            (std::vector<int64_t>{12, 0, 4, 1}));
  EXPECT_NE(c.key_valid, nullptr);  // the buffers died with the call
  EXPECT_NE(last_outputs.weights, nullptr);
  EXPECT_EQ(last_outputs.lse, nullptr);  // not declared, not asked for
  Problem plain = Problem::zeros(DType::f64, 1, 1, 1, 1, 1, 1, 1);
  ASSERT_EQ(impl->forward(plain).status, Status::ok);
  EXPECT_EQ(last_problem.key_valid, nullptr);
  EXPECT_EQ(last_problem.mask, nullptr);
  EXPECT_EQ(last_problem.bias, nullptr);
}

TEST_F(PluginCall, StridesOnlyForImplementationsThatDeclareThem) {
  const Problem p = padded(busy_problem(DType::f32));
  const auto contiguous = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA), "test");
  ASSERT_EQ(contiguous->forward(p).out, expected_copy(p));
  EXPECT_EQ(last_problem.v_strides[2], p.dv);  // packed
  EXPECT_EQ(last_outputs.out_strides[2], p.dv);

  const auto strided =
      make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_STRIDES), "test");
  ASSERT_EQ(strided->forward(p).out, expected_copy(p));
  EXPECT_EQ(last_problem.v_strides[2], p.dv + 1);    // the problem's own
  EXPECT_EQ(last_outputs.out_strides[2], p.dv + 1);  // padded like the inputs
  misdeed = Misdeed::write_into_gap;
  try {
    strided->forward(p);
    FAIL() << "a write into a gap of out went unnoticed";
  } catch (const PluginContractError& e) {
    EXPECT_NE(std::string(e.what()).find("out element at offset 3, in a gap of the strided layout"),
              std::string::npos)
        << e.what();
  }
}

// The message of the PluginContractError forward throws, or "".
std::string contract_error(const Implementation& impl, const Problem& p) {
  try {
    impl.forward(p);
  } catch (const PluginContractError& e) {
    return e.what();
  }
  return "";
}

TEST_F(PluginCall, WritesOutsideTheOutputAndUnwrittenElementsAreCaught) {
  const auto impl = make_plugin_impl(
      descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE),
      "libtest.so");
  const Problem p = busy_problem(DType::f64);
  misdeed = Misdeed::write_past_out;
  EXPECT_NE(contract_error(*impl, p).find("plugin implementation 'copy' (libtest.so) wrote "
                                          "outside its output: out element at offset 99, in the "
                                          "guard region after the buffer"),
            std::string::npos)
      << contract_error(*impl, p);
  misdeed = Misdeed::write_before_weights;
  EXPECT_NE(contract_error(*impl, p).find("weights element at offset -1, in the guard region "
                                          "before the buffer"),
            std::string::npos);
  misdeed = Misdeed::skip_last;
  EXPECT_NE(contract_error(*impl, p).find("returned ATTNCHECK_OK but left out[1, 1, 2, 2] "
                                          "unwritten (still the sentinel NaN); 1 of 36"),
            std::string::npos)
      << contract_error(*impl, p);
  misdeed = Misdeed::bad_code;
  EXPECT_NE(contract_error(*impl, p).find("returned 7 from forward"), std::string::npos);
}

TEST_F(PluginCall, ReturnCodesMapToStatuses) {
  const auto impl = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA), "test");
  const Problem p = busy_problem(DType::f64);
  misdeed = Misdeed::unsupported;
  EXPECT_EQ(impl->forward(p).status, Status::unsupported);
  misdeed = Misdeed::error;
  ForwardResult r = impl->forward(p);
  EXPECT_EQ(r.status, Status::error);
  // One line: the plugin's newline escaped, never printed raw.
  EXPECT_EQ(r.error, "no luck\\nhere");
  misdeed = Misdeed::long_error;  // 256 characters and no NUL: read no further
  r = impl->forward(p);
  EXPECT_EQ(r.error, std::string(256, 'x'));
}

TEST_F(PluginCall, BackwardGradientsComeBackAndAreGuarded) {
  const auto impl =
      make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_BACKWARD), "test");
  Problem p = padded(busy_problem(DType::bf16));
  p.dout.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 1.0);
  const BackwardResult r = impl->backward(p);
  ASSERT_EQ(r.status, Status::ok);
  const Problem c = p.contiguous();
  EXPECT_EQ(r.dq, c.q.data);
  EXPECT_EQ(r.dk, c.k.data);
  EXPECT_EQ(r.dv, c.v.data);
  misdeed = Misdeed::skip_last;
  try {
    impl->backward(p);
    FAIL() << "unwritten dv went unnoticed";
  } catch (const PluginContractError& e) {
    EXPECT_NE(std::string(e.what()).find("left dv[0, 0, 0, 0] unwritten"), std::string::npos)
        << e.what();
  }
  // Without FEATURE_BACKWARD the backward function is never called.
  EXPECT_EQ(make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA), "test")->backward(p).status,
            Status::unsupported);
}

// ---- version 2 output layouts (SPEC 1.1) ----

// A packed f64 batch: sequences of these lengths, 2 heads over 1 K/V head,
// dk 2, dv 3, q and k / v packed [rows][heads][d] with the values 0.25,
// 0.625, ... (exact in f32 and bf16).
Problem packed_batch(const std::vector<int64_t>& q_lens, const std::vector<int64_t>& k_lens,
                     DType dtype) {
  const auto cu = [](const std::vector<int64_t>& n) {
    std::vector<int64_t> c{0};
    for (int64_t x : n) c.push_back(c.back() + x);
    return c;
  };
  Problem p = Problem::zeros(dtype, static_cast<int64_t>(q_lens.size()), 2, 1,
                             *std::max_element(q_lens.begin(), q_lens.end()),
                             *std::max_element(k_lens.begin(), k_lens.end()), 2, 3);
  p.packed = PackedSeqs{cu(q_lens), cu(k_lens)};
  const auto packed = [&](int64_t rows, int64_t heads, int64_t d, double& x) {
    Tensor t = make_tensor(1, rows, heads, d);
    t.strides = {0, d, heads * d, 1};
    for (double& e : t.data) e = round_to(DType::bf16, std::fmod(x += 0.375, 2.0) - 1.0);
    return t;
  };
  double x = 0.25;
  p.q = packed(p.packed->cu_seqlens_q.back(), p.heads, p.dk, x);
  p.k = packed(p.packed->cu_seqlens_k.back(), p.kv_heads, p.dk, x);
  p.v = packed(p.packed->cu_seqlens_k.back(), p.kv_heads, p.dv, x);
  return p;
}

// A value naming element (b, h, i, d).
double code(int64_t b, int64_t h, int64_t i, int64_t d) {
  return 1000.0 * b + 100 * h + 10 * i + d;
}

// Writes code(b, h, i, d) into out and lse at the places SPEC 1.1 gives a
// packed problem; counts the weights arrays it was handed.
int weights_handed = 0;
int coded_forward(void*, const attncheck_problem* p, attncheck_outputs* o) {
  weights_handed += o->weights != nullptr;
  const int64_t* cu = p->cu_seqlens_q;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h)
      for (int64_t i = 0; i < cu[b + 1] - cu[b]; ++i) {
        const int64_t row = cu[b] + i;
        for (int64_t d = 0; d < p->dv; ++d) {
          write_element(p->dtype, o->out,
                        row * o->out_strides[2] + h * o->out_strides[1] + d * o->out_strides[3],
                        code(b, h, i, d));
        }
        if (o->lse) o->lse[h * cu[p->batch] + row] = code(b, h, i, 0);
      }
  return ATTNCHECK_OK;
}

// dq = code + dout(b, h, i, 0) packed like q, dk / dv = code packed like k.
int coded_backward(void*, const attncheck_problem* p, attncheck_grads* g, attncheck_outputs*) {
  const int64_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
  for (int64_t b = 0; b < p->batch; ++b) {
    for (int64_t h = 0; h < p->heads; ++h)
      for (int64_t i = 0; i < cq[b + 1] - cq[b]; ++i) {
        const int64_t row = cq[b] + i;
        const double dout =
            read_element(p->dtype, g->dout, row * g->dout_strides[2] + h * g->dout_strides[1]);
        for (int64_t d = 0; d < p->dk; ++d)
          write_element(p->dtype, g->dq, (row * p->heads + h) * p->dk + d, code(b, h, i, d) + dout);
      }
    for (int64_t h = 0; h < p->kv_heads; ++h)
      for (int64_t j = 0; j < ck[b + 1] - ck[b]; ++j) {
        const int64_t row = ck[b] + j;
        for (int64_t d = 0; d < p->dk; ++d)
          write_element(p->dtype, g->dk, (row * p->kv_heads + h) * p->dk + d, code(b, h, j, d));
        for (int64_t d = 0; d < p->dv; ++d)
          write_element(p->dtype, g->dv, (row * p->kv_heads + h) * p->dv + d, -code(b, h, j, d));
      }
  }
  return ATTNCHECK_OK;
}

TEST_F(PluginCall, PackedQueriesGetPackedOutputsAndNoWeights) {
  attncheck_impl d =
      descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_PACKED | ATTNCHECK_FEATURE_WEIGHTS |
                 ATTNCHECK_FEATURE_LSE | ATTNCHECK_FEATURE_BACKWARD);
  d.forward = coded_forward;
  d.backward = coded_backward;
  // The loader's sentinels show any element of out, lse, dq, dk or dv the
  // layout would leave unwritten; the codes any element put elsewhere.
  Problem p = packed_batch({2, 1, 3}, {1, 3, 2}, DType::f64);
  p.dout.resize(static_cast<size_t>(p.total_q() * p.heads * p.dv));
  for (size_t k = 0; k < p.dout.size(); ++k) p.dout[k] = 0.5 * static_cast<double>(k % 7);
  for (uint32_t strides : {0u, ATTNCHECK_FEATURE_STRIDES}) {
    d.features |= strides;
    const auto impl = make_plugin_impl(d, "test");
    weights_handed = 0;
    const ForwardResult r = impl->forward(p);
    ASSERT_EQ(r.status, Status::ok) << r.error;
    EXPECT_EQ(weights_handed, 0);
    EXPECT_TRUE(r.weights.empty());
    ASSERT_EQ(r.out.size(), static_cast<size_t>(6 * 2 * 3));
    ASSERT_EQ(r.lse.size(), static_cast<size_t>(2 * 6));
    const BackwardResult g = impl->backward(p);
    ASSERT_EQ(g.status, Status::ok) << g.error;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.seq_tq(b); ++i) {
          for (int64_t e = 0; e < p.dv; ++e)
            EXPECT_EQ(r.out[out_index(p, b, h, i, e)], code(b, h, i, e));
          EXPECT_EQ(r.lse[row_index(p, b, h, i)], code(b, h, i, 0));
          for (int64_t e = 0; e < p.dk; ++e) {
            EXPECT_EQ(
                g.dq[static_cast<size_t>(
                    ((p.packed->cu_seqlens_q[static_cast<size_t>(b)] + i) * p.heads + h) * p.dk +
                    e)],
                code(b, h, i, e) + p.dout[out_index(p, b, h, i, 0)]);
          }
        }
    // dk / dv [total_k][kv_heads][d]: sequence_result reads them so.
    for (int64_t b = 0; b < p.batch; ++b) {
      const BackwardResult part = sequence_result(p, g, b);
      for (int64_t j = 0; j < p.seq_tk(b); ++j)
        for (int64_t e = 0; e < p.dk; ++e)
          EXPECT_EQ(part.dk[static_cast<size_t>(j * p.dk + e)], code(b, 0, j, e));
    }
  }
}

TEST(PluginLoad, TheVersionTwoExampleMatchesTheLoopReferencePackedAndPaged) {
  const auto example = load_plugin(plugin_path("example_paged_plugin"));
  ASSERT_EQ(example.size(), 1u);
  const ImplInfo& info = example[0]->info();
  EXPECT_EQ(info.name, "example_c_paged_f32");
  EXPECT_TRUE(info.has(ATTNCHECK_FEATURE_PACKED | ATTNCHECK_FEATURE_PAGED_KV |
                       ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_DESCALE));
  EXPECT_TRUE(info.supports(DTypeCombo{DType::f32, DType::bf16, DType::f32}));
  const auto loop = find_impl("loop_f64");
  // Packed queries and keys (a sequence without keys: a sink-only row),
  // bottom-right causal, a sink and descales; then the same keys paged in
  // pages of 2, shuffled, with a stale slot after sequence 0's keys.
  Problem packed = packed_batch({2, 1, 3}, {3, 0, 2}, DType::f32);
  packed.kv_dtype = DType::bf16;
  packed.causal = true;
  packed.align = Align::bottom_right;
  packed.sink = {0.5, -1.0};
  packed.descale = Descales{1.5, 0.75, 0.625};
  Problem paged = packed;
  paged.packed->cu_seqlens_k.clear();
  paged.paged = PagedKv{{3, 0, 2}, {2, 0, 0, 0, 1, 0}, 2, 2, 3};
  paged.k = make_tensor(3, 1, 2, 2);
  paged.v = make_tensor(3, 1, 2, 3);
  for (Tensor* t : {&paged.k, &paged.v}) std::fill(t->data.begin(), t->data.end(), 64.0);
  for (int64_t b : {0, 2})
    for (int64_t j = 0; j < packed.seq_tk(b); ++j) {
      for (int64_t e = 0; e < 2; ++e)
        paged.k.data[paged.kv_offset(paged.k, b, 0, j, e)] = packed.k_at(b, 0, j, e);
      for (int64_t e = 0; e < 3; ++e)
        paged.v.data[paged.kv_offset(paged.v, b, 0, j, e)] = packed.v_at(b, 0, j, e);
    }
  for (const Problem& p : {packed, paged}) {
    ASSERT_NO_THROW(p.validate());
    const ForwardResult got = example[0]->forward(p);
    ASSERT_EQ(got.status, Status::ok) << got.error;
    Problem wide = p;
    wide.dtype = DType::f64;
    wide.q_dtype = DType::f32;
    const ForwardResult want = loop->forward(wide);
    ASSERT_EQ(want.status, Status::ok) << want.error;
    ASSERT_EQ(got.out.size(), want.out.size());
    // The example computes in double and rounds once to f32 (2^-24).
    for (size_t k = 0; k < got.out.size(); ++k) EXPECT_NEAR(got.out[k], want.out[k], 1e-7) << k;
    for (size_t k = 0; k < got.lse.size(); ++k) EXPECT_NEAR(got.lse[k], want.lse[k], 1e-14) << k;
    // Sequence 1's row has only the sink.
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(got.lse[row_index(p, 1, h, 0)], p.sink[static_cast<size_t>(h)]);
  }
}

TEST_F(PluginCall, AVersionOnePluginGetsVersionOneProblemsOnly) {
  const auto impl = make_plugin_impl(descriptor_v1(ATTNCHECK_FEATURE_GQA), "libv1.so");
  v1_calls = 0;
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    const Problem p = busy_problem(d);
    const ForwardResult r = impl->forward(p);
    ASSERT_EQ(r.status, Status::ok) << dtype_name(d);
    EXPECT_EQ(r.out, expected_copy(p)) << dtype_name(d);
    EXPECT_EQ(last_v1_abi_version, 1u);
  }
  EXPECT_EQ(v1_calls, 4);
  // Version 1 has no field for a sink or another input format: refused
  // before the plugin is called.
  Problem sink = busy_problem(DType::f64);
  sink.sink = {0.5, -1.0};
  try {
    impl->forward(sink);
    FAIL() << "a version 1 plugin was handed a sink";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plugin implementation 'copy_v1' (libv1.so) speaks ABI version 1, whose problem has "
              "no field for ATTNCHECK_FEATURE_SINK (a sink); it is not asked");
  }
  Problem mixed = busy_problem(DType::f64);
  mixed.q_dtype = DType::f32;
  EXPECT_THROW(impl->forward(mixed), InputError);
  Problem same = busy_problem(DType::f64);
  same.q_dtype = DType::f64;  // spelled out, but a version 1 problem
  EXPECT_EQ(impl->forward(same).status, Status::ok);
  EXPECT_EQ(v1_calls, 5);
}

TEST_F(PluginCall, VersionTwoPartsOnlyForImplementationsThatDeclareThem) {
  Problem p = busy_problem(DType::f64);
  p.sink = {0.5, -1.0};
  p.descale = Descales{2.0, 0.5, 1.0};
  const auto without = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_SINK), "t");
  try {
    without->forward(p);
    FAIL() << "an undeclared descale went unnoticed";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plugin implementation 'copy' (t) does not declare ATTNCHECK_FEATURE_DESCALE "
              "(descales), which the problem needs");
  }
  const auto with = make_plugin_impl(
      descriptor(ATTNCHECK_FEATURE_GQA | ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_DESCALE), "t");
  ASSERT_EQ(with->forward(p).status, Status::ok);
  EXPECT_EQ(last_problem.abi_version, 2u);
  EXPECT_EQ(last_problem.q_descale, 2.0);
  EXPECT_EQ(last_problem.k_descale, 0.5);
  EXPECT_NE(last_problem.sink, nullptr);  // the buffer died with the call
}

TEST(PluginGuard, AProblemsVersionTwoPartsNeedTheMatchingDeclaration) {
  ImplInfo info;
  info.dtypes = dtype_bit(DType::f32);
  Problem p = Problem::zeros(DType::f32, 1, 2, 1, 2, 2, 2, 2);
  EXPECT_FALSE(p.needs_abi_v2());
  EXPECT_EQ(undeclared_serving_part(info, p), "");
  p.sink = {0.0, 0.0};
  EXPECT_TRUE(p.needs_abi_v2());
  EXPECT_EQ(undeclared_serving_part(info, p), "ATTNCHECK_FEATURE_SINK (a sink)");
  info.features = ATTNCHECK_FEATURE_SINK;
  EXPECT_EQ(undeclared_serving_part(info, p), "");
  p.packed = PackedSeqs{{0, 1, 2}, {}};
  EXPECT_EQ(undeclared_serving_part(info, p), "ATTNCHECK_FEATURE_PACKED (packed sequences)");
  p.packed.reset();
  p.paged = PagedKv{};
  EXPECT_EQ(undeclared_serving_part(info, p), "ATTNCHECK_FEATURE_PAGED_KV (paged keys and values)");
  p.paged.reset();
  p.kv_dtype = DType::e5m2;
  EXPECT_EQ(undeclared_serving_part(info, p), "the formats q f32, k/v e5m2, out f32");
  info.combos = {{DType::f32, DType::e5m2, DType::f32}};
  EXPECT_EQ(undeclared_serving_part(info, p), "");
  // Every built-in implementation declares version 1 only: the default
  // problem of each of its dtypes needs nothing more.
  for (const auto& impl : registered_impls()) {
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      if (!impl->info().supports(d)) continue;
      EXPECT_EQ(undeclared_serving_part(impl->info(), Problem::zeros(d, 1, 1, 1, 1, 1, 1, 1)), "")
          << impl->info().name;
    }
  }
}

// The stored values a plugin call hands over are encoded the same way: a
// q that its format cannot hold is refused before the plugin runs, f32
// included (a double between two floats is not rounded).
TEST_F(PluginCall, AValueItsFormatCannotHoldIsRefusedBeforeTheCall) {
  const auto impl = make_plugin_impl(descriptor(ATTNCHECK_FEATURE_GQA), "test");
  for (const auto& [d, x] : {std::pair{DType::f32, 1 + 0x1p-30}, std::pair{DType::f16, 0x1p24},
                             std::pair{DType::bf16, 0x1p-140}}) {
    Problem p = busy_problem(d);
    p.q.data[1] = x;
    last_problem = {};
    try {
      impl->forward(p);
      ADD_FAILURE() << dtype_name(d) << ": not refused";
    } catch (const InputError& e) {
      const std::string expected = "cannot be stored in " + std::string(dtype_name(d));
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    EXPECT_EQ(last_problem.abi_version, 0u) << dtype_name(d) << ": the plugin was called";
  }
}

// ---- real shared objects ----

TEST(PluginLoad, TheExamplePluginLoads) {
  const auto impls = load_plugins({plugin_path("attncheck_example_plugin")});
  ASSERT_EQ(impls.size(), 2u);
  EXPECT_EQ(impls[0]->info().name, "example_c_f64");
  EXPECT_EQ(impls[1]->info().name, "example_c_f32");
  EXPECT_EQ(impls[0]->info().kind, Kind::plugin);
  EXPECT_EQ(impls[1]->info().empty_rows, EmptyRowPolicy::error);
  EXPECT_TRUE(impls[0]->info().has(ATTNCHECK_FEATURE_STRIDES | ATTNCHECK_FEATURE_LSE));
}

TEST(PluginLoad, TheExampleBuiltAgainstTheVersionOneHeaderGivesTheSameResults) {
  const auto v1 = load_plugin(plugin_path("example_plugin_v1"));
  const auto v2 = load_plugin(plugin_path("attncheck_example_plugin"));
  ASSERT_EQ(v1.size(), v2.size());
  for (size_t k = 0; k < v1.size(); ++k) {
    const ImplInfo &a = v1[k]->info(), &b = v2[k]->info();
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.dtypes, b.dtypes);
    EXPECT_EQ(a.features, b.features);
    EXPECT_EQ(a.empty_rows, b.empty_rows);
    EXPECT_EQ(a.precision.s_cast_format(), b.precision.s_cast_format());
    EXPECT_EQ(a.precision.ftz_formats, b.precision.ftz_formats);
    EXPECT_EQ(a.combos, b.combos);
    const DType d = a.combos.at(0).out;
    for (const Problem& p : {busy_problem(d), padded(busy_problem(d))}) {
      const ForwardResult x = v1[k]->forward(p), y = v2[k]->forward(p);
      EXPECT_EQ(x.status, y.status) << a.name;
      EXPECT_EQ(x.error, y.error) << a.name;
      // Bit for bit: the same code on the same bytes.
      EXPECT_EQ(std::memcmp(x.out.data(), y.out.data(), x.out.size() * sizeof(double)), 0);
      EXPECT_EQ(x.out.size(), y.out.size());
      EXPECT_EQ(x.weights.size(), y.weights.size());
      EXPECT_EQ(std::memcmp(x.weights.data(), y.weights.data(), x.weights.size() * sizeof(double)),
                0);
      EXPECT_EQ(std::memcmp(x.lse.data(), y.lse.data(), x.lse.size() * sizeof(double)), 0);
    }
  }
}

TEST(PluginLoad, TheExampleAgreesWithTheLoopReference) {
  const auto example = load_plugin(plugin_path("attncheck_example_plugin"));
  const auto loop = find_impl("loop_f64");
  ASSERT_TRUE(loop);
  for (const Problem& p : {busy_problem(DType::f64), padded(busy_problem(DType::f64))}) {
    const ForwardResult a = example[0]->forward(p), b = loop->forward(p);
    ASSERT_EQ(a.status, Status::ok) << a.error;
    ASSERT_EQ(a.out.size(), b.out.size());
    for (size_t k = 0; k < a.out.size(); ++k) EXPECT_DOUBLE_EQ(a.out[k], b.out[k]) << k;
    for (size_t k = 0; k < a.weights.size(); ++k) EXPECT_DOUBLE_EQ(a.weights[k], b.weights[k]) << k;
    for (size_t k = 0; k < a.lse.size(); ++k) EXPECT_DOUBLE_EQ(a.lse[k], b.lse[k]) << k;
  }
}

TEST(PluginLoad, LoadErrorsAreOneLineNamingTheFile) {
  EXPECT_EQ(load_error("nope/missing.so"), "nope/missing.so: no such file");
  const std::string text =
      (std::filesystem::temp_directory_path() / "attncheck_not_elf.so").string();
  std::ofstream(text) << "not a shared object\n";
  EXPECT_EQ(load_error(text).rfind(text + ": cannot load it as a shared object: ", 0), 0u)
      << load_error(text);
  std::filesystem::remove(text);
  const std::string no_symbol = plugin_path("plugin_no_symbol");
  EXPECT_EQ(load_error(no_symbol),
            no_symbol + ": does not export attncheck_plugin_impls (see attncheck/plugin.h)");
  const std::string bad_abi = plugin_path("plugin_bad_abi");
  EXPECT_EQ(load_error(bad_abi),
            bad_abi + ": descriptor 0: abi_version is 3, but this attncheck speaks "
                      "ATTNCHECK_ABI_VERSION 1 and 2 (rebuild the plugin against its plugin.h)");
  EXPECT_EQ(load_error(plugin_path("plugin_mixed_abi")),
            plugin_path("plugin_mixed_abi") +
                ": descriptor 1: abi_version is 1, but descriptor 0's is 2 (all descriptors of a "
                "plugin share one ABI version)");
  EXPECT_EQ(load_error(plugin_path("plugin_small_struct")),
            plugin_path("plugin_small_struct") +
                ": descriptor 0: struct_size is 136, smaller than version 2's attncheck_impl (160 "
                "bytes): set it to sizeof(attncheck_impl)");
  EXPECT_NE(load_error(plugin_path("plugin_bad_combo"))
                .find("descriptor 0 (name 'bad_descriptor'): combos[1].q_dtype 9 is no dtype"),
            std::string::npos)
      << load_error(plugin_path("plugin_bad_combo"));
  EXPECT_NE(load_error(plugin_path("plugin_null_name")).find("descriptor 0: name is NULL"),
            std::string::npos);
  EXPECT_NE(load_error(plugin_path("plugin_no_dtype")).find("declares no dtype"),
            std::string::npos);
  EXPECT_NE(load_error(plugin_path("plugin_bad_feature")).find("unknown feature bits 0x8000"),
            std::string::npos);
  EXPECT_NE(load_error(plugin_path("plugin_builtin_name"))
                .find("implementation 'loop_f64' has the name of a built-in"),
            std::string::npos);
  for (const std::string& e :
       {load_error(bad_abi), load_error(no_symbol), load_error(plugin_path("plugin_mixed_abi")),
        load_error(plugin_path("plugin_small_struct")),
        load_error(plugin_path("plugin_bad_combo"))}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  const std::string example = plugin_path("attncheck_example_plugin");
  try {
    load_plugins({example, example});
    FAIL() << "a name exported twice went unnoticed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'example_c_f64' is also exported by"), std::string::npos);
  }
}

TEST(PluginLoad, AContractViolationFailsThePropertyWithItsMessage) {
  const auto impls = load_plugin(plugin_path("plugin_misbehaving"));
  ASSERT_EQ(impls.size(), 6u);
  RunConfig config;
  config.cases = 3;
  const auto message_of = [&](size_t k) {
    const PropertyOutcome o =
        run_property(*find_property("MatchesOracle"), *impls[k], DType::f64, config);
    EXPECT_EQ(o.status, PropertyStatus::failed) << impls[k]->info().name;
    return o.message;
  };
  const std::string past_out = message_of(0);
  EXPECT_NE(past_out.find("wrote outside its output: out element at offset"), std::string::npos)
      << past_out;
  // Inputs are guarded too, and must come back unchanged.
  const std::string into_q = message_of(4);
  EXPECT_NE(into_q.find("wrote to its input q: element at offset 0, inside it (inputs are "
                        "read-only)"),
            std::string::npos)
      << into_q;
  const std::string past_v = message_of(5);
  EXPECT_NE(past_v.find("wrote to its input v: element at offset"), std::string::npos) << past_v;
  EXPECT_NE(past_v.find("in the guard region after it"), std::string::npos) << past_v;
}

}  // namespace
}  // namespace attncheck
