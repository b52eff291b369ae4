// describe's declaration, as text (formats/declaration_text.h) and as JSON
// (implementation_json, formats/report.h): a declaration without stages
// or paths reads exactly as before SPEC 4.1 (the JSON only gains the new
// keys, null or empty), and the stages and paths a declaration has are
// shown, each path on its own line.

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "formats/declaration_text.h"
#include "formats/report.h"

namespace attncheck {
namespace {

using nlohmann::json;

// A declaration of the kind that existed before precision by stage.
ImplInfo plain() {
  ImplInfo info;
  info.name = "plugged";
  info.kind = Kind::plugin;
  info.description = "a plugged kernel";
  info.origin = "/p/lib.so";
  info.dtypes = dtype_bit(DType::f32);
  info.features = ATTNCHECK_FEATURE_CAUSAL;
  info.empty_rows = EmptyRowPolicy::zero;
  info.precision.accum = DType::f32;
  info.precision.p_cast = DType::f32;
  info.precision.s_cast = DType::bf16;
  info.precision.exp_ulps = 2;
  info.precision.key_block = 64;
  info.precision.ftz_formats = kFtzAccum | kFtzOut;
  info.limits.dk_max = 256;
  return info;
}

// A flash-attention kernel by stage (SPEC 4.1's ggml example) with two
// paths, the declaration the loosest of them.
ImplInfo staged() {
  ImplInfo info = plain();
  info.precision.s_cast.reset();
  info.precision.ftz_formats = 0;
  info.precision.q_cast = DType::f16;
  info.precision.score_accum = DType::f32;
  info.precision.softmax_accum = DType::f32;
  info.precision.pv_accum = DType::f16;
  ImplPath short_rows;
  short_rows.name = "short";
  short_rows.precision = info.precision;
  short_rows.precision.ftz_formats = kFtzPvAccum;
  ImplPath tiled;
  tiled.name = "tiled";
  tiled.precision.accum = DType::f32;
  tiled.precision.p_cast = DType::f32;
  tiled.precision.q_cast_kv = true;
  info.paths = {short_rows, tiled};
  return info;
}

TEST(DeclarationText, AnExistingDeclarationReadsAsBefore) {
  EXPECT_EQ(declaration_text(plain()),
            "plugged\n"
            "  kind:          plugin\n"
            "  description:   a plugged kernel\n"
            "  origin:        /p/lib.so\n"
            "  dtypes:        f32\n"
            "  combos:        q = k/v = out, for each dtype\n"
            "  features:      CAUSAL (0x2)\n"
            "  empty rows:    zero\n"
            "  precision:     accum f32, p_cast f32, s_cast bf16, exp_ulps 2, key_block 64\n"
            "  flush to zero: no, ftz_formats ACCUM, OUT\n"
            "  limits:        max_tq none, max_tk none, max_batch_heads none, dk_min none, "
            "dk_max 256, dk_multiple none, dv_equals_dk no\n");
}

TEST(DeclarationText, ShowsTheDeclaredStagesAndEveryPath) {
  const std::string text = declaration_text(staged());
  // S not cast is in score_accum's format.
  EXPECT_NE(text.find("  precision:     accum f32, p_cast f32, s_cast f32 (score_accum), "
                      "exp_ulps 2, key_block 64, q_cast f16, score_accum f32, softmax_accum f32, "
                      "pv_accum f16\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  path short: accum f32, p_cast f32, s_cast f32 (score_accum), "
                      "exp_ulps 2, key_block 64, q_cast f16, score_accum f32, softmax_accum f32, "
                      "pv_accum f16; flush to zero no, ftz_formats PV_ACCUM\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(text.ends_with("\n  path tiled: accum f32, p_cast f32, s_cast f32 (accum), "
                             "exp_ulps 0, key_block 0 (one pass), q_cast kv; flush to zero no, "
                             "ftz_formats 0 (flush to zero decides)\n"))
      << text;
}

TEST(DeclarationJson, AnExistingDeclarationOnlyGainsTheNewKeys) {
  const json j = implementation_json(plain());
  std::set<std::string> keys, precision_keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  for (const auto& [key, value] : j["precision"].items()) precision_keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"name", "kind", "description", "origin", "caught_by",
                                         "dtypes", "combos", "features", "features_bits",
                                         "empty_rows", "precision", "limits", "paths",
                                         "threads"}));
  EXPECT_EQ(precision_keys,
            (std::set<std::string>{"accum", "p_cast", "s_cast", "exp_ulps", "flush_to_zero",
                                   "ftz_formats", "key_block", "q_cast", "q_cast_kv",
                                   "score_accum", "softmax_accum", "pv_accum"}));
  EXPECT_EQ(j["paths"], json::array());
  const json& p = j["precision"];
  EXPECT_EQ(p["accum"], "f32");
  EXPECT_EQ(p["s_cast"], "bf16");
  EXPECT_EQ(p["exp_ulps"], 2);
  EXPECT_EQ(p["key_block"], 64);
  EXPECT_EQ(p["ftz_formats"], json::array({"ACCUM", "OUT"}));
  for (const char* stage : {"q_cast", "score_accum", "softmax_accum", "pv_accum"}) {
    EXPECT_TRUE(p[stage].is_null()) << stage;
  }
  EXPECT_EQ(p["q_cast_kv"], false);
}

TEST(DeclarationJson, CarriesTheStagesAndEveryPath) {
  const json j = implementation_json(staged());
  EXPECT_EQ(j["precision"]["q_cast"], "f16");
  EXPECT_EQ(j["precision"]["q_cast_kv"], false);
  EXPECT_EQ(j["precision"]["score_accum"], "f32");
  EXPECT_EQ(j["precision"]["softmax_accum"], "f32");
  EXPECT_EQ(j["precision"]["pv_accum"], "f16");
  ASSERT_EQ(j["paths"].size(), 2u);
  EXPECT_EQ(j["paths"][0]["name"], "short");
  EXPECT_EQ(j["paths"][0]["precision"]["pv_accum"], "f16");
  EXPECT_EQ(j["paths"][0]["precision"]["ftz_formats"], json::array({"PV_ACCUM"}));
  EXPECT_EQ(j["paths"][1]["name"], "tiled");
  EXPECT_EQ(j["paths"][1]["precision"]["q_cast"], "kv");
  EXPECT_EQ(j["paths"][1]["precision"]["q_cast_kv"], true);
  EXPECT_TRUE(j["paths"][1]["precision"]["pv_accum"].is_null());
  // Each path's precision is spelled as the declaration's own.
  EXPECT_EQ(j["paths"][0]["precision"].size(), j["precision"].size());
}

}  // namespace
}  // namespace attncheck
