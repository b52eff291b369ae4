// Tests of the version 2 fields of problem files (SPEC 5.3): formats,
// descales, sinks, packed and paged sequences round-trip bit-exactly in
// their own layouts, a version 1 file is written as before, and every
// malformed version 2 field is one line naming the file and the field.

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/json.h"

namespace attncheck {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

uint64_t bits(double x) { return std::bit_cast<uint64_t>(x); }

void expect_same_bits(const std::vector<double>& a, const std::vector<double>& b,
                      const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bits(a[i]), bits(b[i])) << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

// Values of `format` that are easy to get wrong (signed zero, subnormals,
// the largest finite value), cycled through `data`.
void fill(std::vector<double>& data, DType format) {
  const double tiny = format == DType::e4m3 ? 0x1p-9 : format == DType::e5m2 ? 0x1p-16 : 0x1p-24;
  const std::vector<double> values = {-0.0, 0.5, -1.25, tiny, -3 * tiny, max_finite(format),
                                      1.0, -0.375};
  for (size_t i = 0; i < data.size(); ++i) data[i] = round_to(format, values[(i * 5 + 1) % values.size()]);
}

// Every version 2 field but the sequences: mixed formats, descales, sinks.
Problem mixed_problem() {
  Problem p = Problem::zeros(DType::bf16, 2, 4, 2, 3, 5, 2, 3);
  p.q_dtype = DType::e4m3;
  p.kv_dtype = DType::e5m2;
  fill(p.q.data, DType::e4m3);
  fill(p.k.data, DType::e5m2);
  fill(p.v.data, DType::e5m2);
  p.descale = Descales{0.125, 1.0 / 3.0, 0x1p-1000};
  p.sink = {0.1, -2.0, -0.0, 1e-300};
  p.causal = true;
  p.align = Align::bottom_right;
  p.dout.assign(2 * 4 * 3 * 3, 0.0);
  fill(p.dout, DType::bf16);
  return p;
}

// Packed queries and keys: three sequences, the middle one without queries
// and the last without keys.
Problem packed_problem(bool packed_keys) {
  const std::vector<int64_t> cu_q = {0, 2, 2, 5}, cu_k = {0, 4, 5, 5};
  Problem p = Problem::zeros(DType::f32, 3, 2, 1, 3, 4, 2, 3);
  p.packed = PackedSeqs{cu_q, packed_keys ? cu_k : std::vector<int64_t>{}};
  p.q = make_tensor(1, 5, 2, 2);
  p.q.strides = {0, 2, 4, 1};
  fill(p.q.data, DType::f32);
  if (packed_keys) {
    p.k = make_tensor(1, 5, 1, 2);
    p.k.strides = {0, 2, 2, 1};
    p.v = make_tensor(1, 5, 1, 3);
    p.v.strides = {0, 3, 3, 1};
  }
  fill(p.k.data, DType::f32);
  fill(p.v.data, DType::f32);
  p.sink = {0.25, -1.5};
  p.window_left = 1;
  p.dout.assign(5 * 2 * 3, 0.0);
  fill(p.dout, DType::f32);
  return p;
}

// Paged keys: pages in any order, a shared page, unused table entries of
// -1, stale slots past a sequence's keys.
Problem paged_problem(bool packed_queries) {
  Problem p = Problem::zeros(DType::f16, 2, 2, 2, 2, 5, 3, 2);
  PagedKv pg;
  pg.page_size = 2;
  pg.num_pages = 4;
  pg.seqlens_k = {5, 1};
  pg.block_table_stride = 3;
  pg.block_table = {3, 0, 1, 1, -1, -1};
  p.paged = pg;
  p.k = make_tensor(4, 2, 2, 3);
  p.v = make_tensor(4, 2, 2, 2);
  fill(p.k.data, DType::f16);
  fill(p.v.data, DType::f16);
  if (packed_queries) {
    p.packed = PackedSeqs{{0, 1, 3}, {}};
    p.q = make_tensor(1, 3, 2, 3);
    p.q.strides = {0, 3, 6, 1};
  }
  fill(p.q.data, DType::f16);
  p.align = Align::bottom_right;
  return p;
}

void expect_same_serving_problem(const Problem& a, const Problem& b) {
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.q_dtype, b.q_dtype);
  EXPECT_EQ(a.kv_dtype, b.kv_dtype);
  for (auto [x, y] : {std::pair{a.batch, b.batch}, {a.heads, b.heads}, {a.kv_heads, b.kv_heads},
                      {a.tq, b.tq}, {a.tk, b.tk}, {a.dk, b.dk}, {a.dv, b.dv}}) {
    EXPECT_EQ(x, y);
  }
  // The written tensors are in their contiguous layouts: data and strides
  // come back as they were.
  for (auto [t, u, name] : {std::tuple{&a.q, &b.q, "q"}, {&a.k, &b.k, "k"}, {&a.v, &b.v, "v"}}) {
    expect_same_bits(t->data, u->data, name);
    EXPECT_EQ(t->strides, u->strides) << name;
  }
  ASSERT_EQ(a.descale.has_value(), b.descale.has_value());
  if (a.descale) {
    EXPECT_EQ(bits(a.descale->q), bits(b.descale->q));
    EXPECT_EQ(bits(a.descale->k), bits(b.descale->k));
    EXPECT_EQ(bits(a.descale->v), bits(b.descale->v));
  }
  expect_same_bits(a.sink, b.sink, "sink");
  ASSERT_EQ(a.packed.has_value(), b.packed.has_value());
  if (a.packed) {
    EXPECT_EQ(a.packed->cu_seqlens_q, b.packed->cu_seqlens_q);
    EXPECT_EQ(a.packed->cu_seqlens_k, b.packed->cu_seqlens_k);
  }
  ASSERT_EQ(a.paged.has_value(), b.paged.has_value());
  if (a.paged) {
    EXPECT_EQ(a.paged->page_size, b.paged->page_size);
    EXPECT_EQ(a.paged->num_pages, b.paged->num_pages);
    EXPECT_EQ(a.paged->block_table_stride, b.paged->block_table_stride);
    EXPECT_EQ(a.paged->block_table, b.paged->block_table);
    EXPECT_EQ(a.paged->seqlens_k, b.paged->seqlens_k);
  }
  EXPECT_EQ(a.causal, b.causal);
  EXPECT_EQ(a.align, b.align);
  EXPECT_EQ(a.window_left, b.window_left);
  EXPECT_EQ(bits(a.scale), bits(b.scale));
  expect_same_bits(a.dout, b.dout, "dout");
}

Problem round_trip(const Problem& p) {
  return problem_from_json(json::parse(problem_to_json(p).dump()), "v2.json");
}

TEST(FixtureServing, MixedFormatsDescalesAndSinksRoundTrip) {
  const Problem p = mixed_problem();
  p.validate();
  const json j = problem_to_json(p);
  EXPECT_EQ(j["q_dtype"], "e4m3");
  EXPECT_EQ(j["kv_dtype"], "e5m2");
  EXPECT_EQ(j["dtype"], "bf16");
  expect_same_serving_problem(p, round_trip(p));
}

TEST(FixtureServing, EachFeatureAloneRoundTrips) {
  const Problem base = Problem::zeros(DType::f16, 1, 2, 1, 2, 3, 2, 2);
  std::vector<std::function<void(Problem&)>> features = {
      [](Problem& p) { p.q_dtype = DType::e4m3; },
      [](Problem& p) { p.kv_dtype = DType::e5m2; },
      // A format equal to dtype stated anyway: kept as stated.
      [](Problem& p) { p.q_dtype = DType::f16; },
      [](Problem& p) { p.descale = Descales{2.0, 1.0, 0.5}; },
      [](Problem& p) { p.sink = {-1.0, 3.5}; },
  };
  for (size_t f = 0; f < features.size(); ++f) {
    SCOPED_TRACE(f);
    Problem p = base;
    features[f](p);
    fill(p.q.data, DType::e4m3);
    fill(p.k.data, DType::e5m2);
    fill(p.v.data, DType::e5m2);
    p.validate();
    expect_same_serving_problem(p, round_trip(p));
  }
}

TEST(FixtureServing, PackedProblemsRoundTripInTheirLayout) {
  for (bool packed_keys : {false, true}) {
    SCOPED_TRACE(packed_keys);
    const Problem p = packed_problem(packed_keys);
    p.validate();
    const json j = problem_to_json(p);
    // q flat [total_q][heads][dk], dout [total_q][heads][dv], k / v packed
    // [total_k][kv_heads][d] or dense.
    ASSERT_EQ(j["q"].size(), 5u * 2 * 2);
    EXPECT_EQ(j["dout"].size(), 5u * 2 * 3);
    EXPECT_EQ(j["k"].size(), packed_keys ? 5u * 1 * 2 : 3u * 1 * 4 * 2);
    EXPECT_EQ(j["cu_seqlens_q"], json({0, 2, 2, 5}));
    EXPECT_EQ(j.contains("cu_seqlens_k"), packed_keys);
    // Element (b = 2, h = 1, i = 1, d = 0) is row 3 of the packed q.
    EXPECT_EQ(bits(number_from_json(j["q"][(3 * 2 + 1) * 2 + 0], "q")), bits(p.q_at(2, 1, 1, 0)));
    const Problem back = round_trip(p);
    expect_same_serving_problem(p, back);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < back.seq_tq(b); ++i)
        for (int64_t d = 0; d < 2; ++d) EXPECT_EQ(bits(back.q_at(b, 1, i, d)), bits(p.q_at(b, 1, i, d)));
  }
}

TEST(FixtureServing, PackedTensorsAreWrittenAsTheirLogicalValues) {
  // q stored [heads][rows][d] (strides {0, rows * d, d, 1}): the file is
  // the same as for the contiguous packed layout.
  const Problem c = packed_problem(true);
  Problem s = c;
  s.q.strides = {0, 5 * 2, 2, 1};
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 2; ++d)
        s.q.data[static_cast<size_t>(h * 10 + r * 2 + d)] =
            c.q.data[static_cast<size_t>(r * 4 + h * 2 + d)];
  ASSERT_NE(s.q.data, c.q.data);
  s.validate();
  EXPECT_EQ(problem_to_json(s).dump(), problem_to_json(c).dump());
}

TEST(FixtureServing, PagedProblemsRoundTripInTheirLayout) {
  for (bool packed_queries : {false, true}) {
    SCOPED_TRACE(packed_queries);
    const Problem p = paged_problem(packed_queries);
    p.validate();
    const json j = problem_to_json(p);
    EXPECT_EQ(j["k"].size(), 4u * 2 * 2 * 3);  // [num_pages][kv_heads][page_size][dk]
    EXPECT_EQ(j["v"].size(), 4u * 2 * 2 * 2);
    EXPECT_EQ(j["paged"]["block_table"], json({3, 0, 1, 1, -1, -1}));
    EXPECT_EQ(j["paged"]["block_table_stride"], 3);
    const Problem back = round_trip(p);
    expect_same_serving_problem(p, back);
    // Key 4 of sequence 0 is slot 0 of page block_table[2] = 1.
    EXPECT_EQ(bits(back.k_at(0, 1, 4, 2)), bits(p.k.at(1, 1, 0, 2)));
  }
}

TEST(FixtureServing, BlockTableStrideMayBeLeftOut) {
  // SPEC 5.3 lists page_size, num_pages, block_table and seqlens_k: the
  // stride is then the table's length over batch.
  const Problem p = paged_problem(false);
  json j = problem_to_json(p);
  j["paged"].erase("block_table_stride");
  EXPECT_EQ(problem_from_json(j, "v2.json").paged->block_table_stride, 3);
  j["paged"]["block_table"].erase(5);
  try {
    problem_from_json(j, "v2.json");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'block_table': 5 entries are not batch = 2 rows"),
              std::string::npos)
        << e.what();
  }
}

TEST(FixtureServing, MixedFormatsWithSequencesRoundTripThroughAFile) {
  Fixture f;
  f.problem = paged_problem(true);
  f.problem.q_dtype = DType::e4m3;
  f.problem.kv_dtype = DType::e5m2;
  fill(f.problem.q.data, DType::e4m3);
  fill(f.problem.k.data, DType::e5m2);
  fill(f.problem.v.data, DType::e5m2);
  f.problem.descale = Descales{0.5, 0.25, 4.0};
  f.problem.sink = {0.0, -0.5};
  f.meta.dtype = "q=e4m3,kv=e5m2,out=f16";
  f.problem.validate();
  const fs::path dir = fs::path(::testing::TempDir()) / "attncheck_test_fixture_serving";
  fs::remove_all(dir);
  const std::string path = (dir / "case.json").string();
  save_fixture(path, f);
  const Fixture g = load_fixture(path);
  expect_same_serving_problem(f.problem, g.problem);
  EXPECT_EQ(g.meta, f.meta);
  // The version 2 fields follow the version 1 ones, in SPEC 5.3's order.
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  for (const char* key : {"\"dout\"", "\"q_dtype\"", "\"kv_dtype\"", "\"descale\"", "\"sink\"",
                          "\"cu_seqlens_q\"", "\"paged\"", "\"page_size\"", "\"num_pages\"",
                          "\"block_table_stride\"", "\"block_table\"", "\"seqlens_k\"",
                          "\"meta\""}) {
    const size_t next = text.find(key, at);
    EXPECT_NE(next, std::string::npos) << key << " missing or out of order";
    if (next != std::string::npos) at = next;
  }
  fs::remove_all(dir);
}

TEST(FixtureServing, VersionOneProblemsHaveNoVersionTwoFields) {
  Problem p = Problem::zeros(DType::f32, 1, 2, 2, 2, 2, 1, 1);
  const json j = problem_to_json(p);
  for (const char* key :
       {"q_dtype", "kv_dtype", "descale", "sink", "cu_seqlens_q", "cu_seqlens_k", "paged"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  const Problem back = round_trip(p);
  EXPECT_FALSE(back.needs_abi_v2());
  EXPECT_FALSE(back.q_dtype.has_value());
  EXPECT_FALSE(back.packed.has_value());
}

// The committed fixtures (fixtures/ and the fuzz corpus's seeds of saved
// failures) were written by save_fixture, most before version 2: reading
// and writing each gives its bytes back, so version 1 files are written as
// they were (no version 2 field appears in them), and the version 2 cases
// kept since (the descaled regressions) keep theirs. The problem
// files, written by hand, are compared as JSON.
TEST(FixtureServing, CommittedFixturesAreWrittenBackByteForByte) {
  const fs::path source(ATTNCHECK_SOURCE_DIR);
  const fs::path dir = fs::path(::testing::TempDir()) / "attncheck_test_fixture_serving_bytes";
  fs::remove_all(dir);
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(source / "fixtures")) {
    if (entry.path().extension() == ".json" &&
        entry.path().filename() != "expected-failures.json") {
      files.push_back(entry.path());
    }
  }
  for (const auto& entry : fs::directory_iterator(source / "tests/fuzz/corpus/fixture")) {
    if (entry.path().filename().string().starts_with("seed-broken_")) files.push_back(entry.path());
  }
  int fixtures = 0, problems = 0;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream in(file, std::ios::binary);
    const std::string original((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    const Fixture f = load_fixture(file.string());
    if (json::parse(original)["format"] == "attncheck-problem-1") {
      // Hand-written: "scale": null stands for the default, written as it.
      json expected = json::parse(original);
      if (expected["scale"].is_null()) expected["scale"] = Problem::default_scale(f.problem.dk);
      EXPECT_EQ(problem_to_json(f.problem), expected);
      ++problems;
      continue;
    }
    const std::string copy = (dir / file.filename()).string();
    save_fixture(copy, f);
    std::ifstream back(copy, std::ios::binary);
    const std::string written((std::istreambuf_iterator<char>(back)),
                              std::istreambuf_iterator<char>());
    EXPECT_EQ(written, original);
    ++fixtures;
  }
  EXPECT_GE(fixtures, 10);
  EXPECT_GE(problems, 2);
  fs::remove_all(dir);
}

// The fuzz corpus's version 2 seed is accepted (a rejected seed would
// leave the fuzzer without the version 2 fields' structure).
TEST(FixtureServing, FuzzSeedIsAVersionTwoProblem) {
  const Fixture f = load_fixture(std::string(ATTNCHECK_SOURCE_DIR) +
                                 "/tests/fuzz/corpus/fixture/seed-v2-packed-paged-fp8-sink.json");
  EXPECT_TRUE(f.problem.packed_q());
  EXPECT_TRUE(f.problem.paged.has_value());
  EXPECT_EQ(f.problem.q_dtype, DType::e4m3);
  EXPECT_EQ(f.problem.kv_dtype, DType::e5m2);
  EXPECT_EQ(f.problem.sink.size(), 2u);
  EXPECT_TRUE(f.problem.descale.has_value());
}

struct BadServingCase {
  const char* name;
  const char* field;   // the field the message must name
  const char* phrase;  // and what it must say
  std::function<Problem()> base;
  std::function<void(json&)> mutate;
};

std::vector<BadServingCase> bad_serving_cases() {
  const auto mixed = [] { return mixed_problem(); };
  const auto packed = [] { return packed_problem(true); };
  const auto paged = [] { return paged_problem(false); };
  return {
      {"q_dtype_unknown", "'q_dtype'", "unknown format \"e3m4\"", mixed,
       [](json& j) { j["q_dtype"] = "e3m4"; }},
      {"kv_dtype_not_string", "'kv_dtype'", "expected a string", mixed,
       [](json& j) { j["kv_dtype"] = 8; }},
      {"dtype_fp8", "'dtype'", "e4m3 is an input format only", mixed,
       [](json& j) { j["dtype"] = "e4m3"; }},
      {"q_not_e4m3", "'q'", "not representable in e4m3", mixed,
       [](json& j) { j["q"][1] = 0.1; }},
      {"k_beyond_e5m2", "'k'", "not representable in e5m2", mixed,
       [](json& j) { j["k"][0] = 65536.0; }},
      {"descale_missing_part", "'v'", "missing", mixed,
       [](json& j) { j["descale"].erase("v"); }},
      {"descale_zero", "'k'", "must be finite and > 0", mixed,
       [](json& j) { j["descale"]["k"] = 0; }},
      {"descale_unknown_part", "'o'", "unknown field", mixed,
       [](json& j) { j["descale"]["o"] = 1; }},
      {"descale_not_object", "'descale'", "expected a JSON object", mixed,
       [](json& j) { j["descale"] = 0.5; }},
      {"sink_length", "'sink'", "expected 4 numbers, got 3", mixed,
       [](json& j) { j["sink"].erase(0); }},
      {"sink_infinite", "'sink'", "not finite", mixed, [](json& j) { j["sink"][2] = "-inf"; }},
      {"cu_seqlens_q_start", "'cu_seqlens_q'", "must start at 0", packed,
       [](json& j) { j["cu_seqlens_q"] = {1, 2, 2, 5}; }},
      {"cu_seqlens_q_decreasing", "'cu_seqlens_q'", "must not decrease", packed,
       [](json& j) { j["cu_seqlens_q"] = {0, 3, 2, 5}; }},
      {"cu_seqlens_q_length", "'cu_seqlens_q'", "expected 4 integers", packed,
       [](json& j) { j["cu_seqlens_q"] = {0, 2, 5}; }},
      {"cu_seqlens_k_longest", "'cu_seqlens_k'", "the longest sequence has 3, but tk is 4",
       packed, [](json& j) { j["cu_seqlens_k"] = {0, 3, 5, 5}; }},
      {"cu_seqlens_k_fraction", "'cu_seqlens_k'", "expected an integer", packed,
       [](json& j) { j["cu_seqlens_k"][1] = 3.5; }},
      {"packed_q_dense_size", "'q'", "expected 20 numbers", packed,
       [](json& j) {
         for (int i = 0; i < 4; ++i) j["q"].push_back(0);
       }},
      {"packed_dout_size", "'dout'", "expected 30 numbers", packed,
       [](json& j) { j["dout"].push_back(0); }},
      {"packed_with_key_valid", "'key_valid'", "a packed or paged problem takes none", packed,
       [](json& j) { j["key_valid"] = json::array({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}); }},
      {"packed_with_mask", "'mask'", "a packed or paged problem takes none", packed,
       [](json& j) {
         j["mask"] = {{"shape", {1, 1, 3, 4}}, {"data", std::vector<int>(12, 1)}};
       }},
      {"paged_and_packed_keys", "'paged'", "not both", packed,
       [](json& j) {
         j["paged"] = problem_to_json(paged_problem(false))["paged"];
       }},
      {"paged_with_dout", "'dout'", "paged K/V has no backward", paged,
       [](json& j) { j["dout"] = std::vector<double>(2 * 2 * 2 * 2, 0.5); }},
      {"paged_with_bias", "'bias'", "a packed or paged problem takes none", paged,
       [](json& j) {
         j["bias"] = {{"shape", {1, 1, 2, 5}}, {"data", std::vector<double>(10, 0.5)}};
       }},
      {"block_table_out_of_range", "'block_table'", "sequence 0 page 1 is 4, outside [0, num_pages = 4)",
       paged, [](json& j) { j["paged"]["block_table"][1] = 4; }},
      {"block_table_negative", "'block_table'", "sequence 1 page 0 is -1", paged,
       [](json& j) { j["paged"]["block_table"][3] = -1; }},
      {"block_table_length", "'block_table'", "expected 6 integers", paged,
       [](json& j) { j["paged"]["block_table"].push_back(0); }},
      {"block_table_stride_small", "'block_table_stride'", "fewer than tk = 5 keys need (3)",
       paged, [](json& j) { j["paged"]["block_table_stride"] = 2; }},
      {"page_size_zero", "'page_size'", "must be >= 1", paged,
       [](json& j) { j["paged"]["page_size"] = 0; }},
      {"num_pages_missing", "'num_pages'", "missing", paged,
       [](json& j) { j["paged"].erase("num_pages"); }},
      {"seqlens_k_negative", "'seqlens_k'", "element 1: -1 is negative", paged,
       [](json& j) { j["paged"]["seqlens_k"][1] = -1; }},
      {"seqlens_k_longest", "'seqlens_k'", "the longest sequence has 4 keys, but tk is 5", paged,
       [](json& j) { j["paged"]["seqlens_k"][0] = 4; }},
      {"paged_k_size", "'k'", "expected 48 numbers", paged, [](json& j) { j["k"].erase(0); }},
      {"paged_unknown_field", "'pagesize'", "unknown field", paged,
       [](json& j) { j["paged"]["pagesize"] = 2; }},
  };
}

TEST(FixtureServing, MalformedVersionTwoFieldsNameTheFileAndTheField) {
  const fs::path dir = fs::path(::testing::TempDir()) / "attncheck_test_fixture_serving_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const BadServingCase& c : bad_serving_cases()) {
    SCOPED_TRACE(c.name);
    json j = problem_to_json(c.base());
    ASSERT_NO_THROW(problem_from_json(j, "base.json"));
    c.mutate(j);
    const std::string path = (dir / (std::string(c.name) + ".json")).string();
    std::ofstream(path) << j.dump(1);
    try {
      load_fixture(path);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find("field " + std::string(c.field)), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.phrase), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attncheck
