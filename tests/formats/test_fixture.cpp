// Tests of the JSON problem, fixture and oracle files (SPEC section 5.3):
// bit-exact round trips, defaults, and one clear line for every malformed
// input.

#include "attncheck/fixture.h"
#include "formats/json.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attncheck/dtype.h"

namespace attncheck {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t bits(double x) { return std::bit_cast<uint64_t>(x); }

void expect_same_bits(const std::vector<double>& a,
                      const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bits(a[i]), bits(b[i]))
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

// A fresh directory per test under gtest's temporary directory.
fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::path(::testing::TempDir()) / ("attncheck_test_fixture_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Values that are easy to get wrong when printing and parsing.
std::vector<double> awkward_values() {
  return {-0.0,
          0.0,
          0.1,
          1.0 / 3.0,
          -2.0 / 3.0,
          std::numeric_limits<double>::denorm_min(),
          -std::numeric_limits<double>::denorm_min() * 12345,
          std::numeric_limits<double>::min() / 3,
          std::numeric_limits<double>::min(),
          std::numeric_limits<double>::max(),
          -std::numeric_limits<double>::max(),
          std::nextafter(1.0, 2.0),
          std::nextafter(1.0, 0.0),
          1e22,
          9007199254740993.0,
          123456789.0,
          -5e-300,
          std::ldexp(1.0, 60)};
}

// A problem using every field, with awkward values in every tensor.
Problem full_problem() {
  Problem p = Problem::zeros(DType::f64, 2, 4, 2, 3, 5, 3, 2);
  const std::vector<double> vals = awkward_values();
  size_t n = 0;
  for (auto* t : {&p.q, &p.k, &p.v})
    for (double& x : t->data) x = vals[n++ % vals.size()];
  p.key_valid = {1, 1, 0, 1, 1, 0, 1, 1, 1, 1};
  Broadcast<uint8_t> m;
  m.heads = 4;
  m.data.assign(4 * 3 * 5, 1);
  m.data[7] = 0;
  p.mask = m;
  Broadcast<double> bias;
  bias.batch = 2;
  bias.data.assign(2 * 3 * 5, 0.1);
  bias.data[3] = -0.0;
  bias.data[4] = std::numeric_limits<double>::denorm_min();
  p.bias = bias;
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 2;
  p.window_right = 0;
  p.scale = 1.0 / 3.0;
  p.softcap = 0.1;
  p.dout.assign(2 * 4 * 3 * 2, 1.0 / 3.0);
  p.dout[0] = -0.0;
  return p;
}

void expect_same_problem(const Problem& a, const Problem& b) {
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.tq, b.tq);
  EXPECT_EQ(a.tk, b.tk);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  const Problem ca = a.contiguous(), cb = b.contiguous();
  expect_same_bits(ca.q.data, cb.q.data, "q");
  expect_same_bits(ca.k.data, cb.k.data, "k");
  expect_same_bits(ca.v.data, cb.v.data, "v");
  EXPECT_EQ(a.key_valid, b.key_valid);
  ASSERT_EQ(a.mask.has_value(), b.mask.has_value());
  if (a.mask) {
    EXPECT_EQ(a.mask->batch, b.mask->batch);
    EXPECT_EQ(a.mask->heads, b.mask->heads);
    EXPECT_EQ(a.mask->data, b.mask->data);
  }
  ASSERT_EQ(a.bias.has_value(), b.bias.has_value());
  if (a.bias) {
    EXPECT_EQ(a.bias->batch, b.bias->batch);
    EXPECT_EQ(a.bias->heads, b.bias->heads);
    expect_same_bits(a.bias->data, b.bias->data, "bias");
  }
  EXPECT_EQ(a.causal, b.causal);
  EXPECT_EQ(a.align, b.align);
  EXPECT_EQ(a.window_left, b.window_left);
  EXPECT_EQ(a.window_right, b.window_right);
  EXPECT_EQ(bits(a.scale), bits(b.scale));
  EXPECT_EQ(bits(a.softcap), bits(b.softcap));
  expect_same_bits(a.dout, b.dout, "dout");
}

// A minimal valid problem: only the required fields.
json minimal_json() {
  return json{{"format", "attncheck-problem-1"},
              {"dtype", "f64"},
              {"batch", 1},
              {"heads", 2},
              {"tq", 2},
              {"tk", 2},
              {"dk", 2},
              {"dv", 1},
              {"q", {1, 0, 0, 1, 0.5, 0.5, -1, 2}},
              {"k", {1, 0, 0, 1, 0.5, 0, 0, 2}},
              {"v", {2, 4, -1, 3}}};
}

// A key twice in one object is rejected (the last one would silently win);
// the same key in two objects is fine.
TEST(Fixture, DuplicateKeysAreRejected) {
  EXPECT_NO_THROW(parse_json(R"({"a": {"x": 1}, "b": {"x": 2}})", "t.json"));
  try {
    parse_json(R"({"format": "attncheck-problem-1", "tq": 2, "tq": 3})", "t.json");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "t.json: key \"tq\" appears twice in one object");
  }
  EXPECT_THROW(parse_json(R"([{"a": 1}, {"b": {"c": 1, "c": 1}}])", "t.json"), InputError);
}

TEST(Fixture, DumpedDoublesReadBackBitExactly) {
  // The claim number_to_json relies on: nlohmann prints a round-trip
  // decimal for every finite double.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const double x = std::bit_cast<double>(rng());
    if (!std::isfinite(x)) continue;
    const double y =
        number_from_json(json::parse(number_to_json(x).dump()), "test");
    ASSERT_EQ(bits(x), bits(y)) << x;
  }
  for (double x : awkward_values()) {
    const double y =
        number_from_json(json::parse(number_to_json(x).dump()), "test");
    EXPECT_EQ(bits(x), bits(y)) << x;
  }
}

TEST(Fixture, NonFiniteNumbersAreStrings) {
  EXPECT_EQ(number_to_json(kInf), json("inf"));
  EXPECT_EQ(number_to_json(-kInf), json("-inf"));
  EXPECT_EQ(number_to_json(std::nan("")), json("nan"));
  EXPECT_EQ(number_from_json(json("inf"), "x"), kInf);
  EXPECT_EQ(number_from_json(json("-inf"), "x"), -kInf);
  EXPECT_TRUE(std::isnan(number_from_json(json("nan"), "x")));
  EXPECT_EQ(number_from_json(json(3), "x"), 3.0);
  EXPECT_THROW(number_from_json(json("Infinity"), "x"), InputError);
  EXPECT_THROW(number_from_json(json(nullptr), "x"), InputError);
}

TEST(Fixture, ProblemRoundTripsBitExactly) {
  const Problem p = full_problem();
  p.validate();
  const Problem back = problem_from_json(json::parse(problem_to_json(p).dump()),
                                         "roundtrip.json");
  expect_same_problem(p, back);
}

TEST(Fixture, StridedProblemIsWrittenAsItsLogicalValues) {
  const Problem c = full_problem();
  Problem s = c;
  // q stored as [b][t][h][d].
  s.q.strides = {3 * 4 * 3, 3, 4 * 3, 1};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t t = 0; t < 3; ++t) s.q.at(b, h, i, t) = c.q.at(b, h, i, t);
  ASSERT_NE(s.q.data, c.q.data);
  EXPECT_EQ(problem_to_json(s).dump(), problem_to_json(c).dump());
}

TEST(Fixture, FixtureRoundTripsThroughAFile) {
  Fixture f;
  f.problem = full_problem();
  f.args =
      json{{"permutation", {2, 0, 1}}, {"coefficient", number_to_json(-0.0)}};
  f.expected =
      json{{"out",
            {number_to_json(kInf), number_to_json(0.1), number_to_json(-kInf)}},
           {"raw_inf", kInf}};
  f.meta.property = "RowSumsToOne";
  f.meta.seed = 42;
  f.meta.other = json{{"host", "ci-7"}};
  const fs::path dir = temp_dir("roundtrip");
  const std::string path = (dir / "nested" / "deeper" / "case.json").string();
  save_fixture(path, f);
  const Fixture g = load_fixture(path);
  expect_same_problem(f.problem, g.problem);
  EXPECT_EQ(g.args["permutation"], json({2, 0, 1}));
  EXPECT_TRUE(std::signbit(number_from_json(g.args["coefficient"], "c")));
  EXPECT_EQ(number_from_json(g.expected["out"][0], "e"), kInf);
  EXPECT_EQ(number_from_json(g.expected["out"][1], "e"), 0.1);
  EXPECT_EQ(number_from_json(g.expected["out"][2], "e"), -kInf);
  // A raw infinity put into free-form JSON still reads back (nlohmann alone
  // would write null).
  EXPECT_EQ(number_from_json(g.expected["raw_inf"], "e"), kInf);
  EXPECT_EQ(g.meta, f.meta);
  // Written in the order of SPEC section 5.3, a tensor per line.
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(second, R"( "format": "attncheck-fixture-1",)");
  fs::remove_all(dir);
}

TEST(Fixture, OmittedFieldsTakeTheirDefaults) {
  for (bool explicit_nulls : {false, true}) {
    json j = minimal_json();
    if (explicit_nulls) {
      for (const char* name :
           {"kv_heads", "key_valid", "mask", "bias", "causal", "align",
            "window", "scale", "softcap", "dout"}) {
        j[name] = nullptr;
      }
    }
    const Problem p = problem_from_json(j, "minimal.json");
    EXPECT_EQ(p.kv_heads, 2);
    EXPECT_TRUE(p.key_valid.empty());
    EXPECT_FALSE(p.mask.has_value());
    EXPECT_FALSE(p.bias.has_value());
    EXPECT_FALSE(p.causal);
    EXPECT_EQ(p.align, Align::top_left);
    EXPECT_EQ(p.window_left, -1);
    EXPECT_EQ(p.window_right, -1);
    EXPECT_EQ(p.scale, Problem::default_scale(2));
    EXPECT_EQ(p.softcap, 0.0);
    EXPECT_TRUE(p.dout.empty());
    EXPECT_EQ(p.q.at(0, 1, 1, 1), 2.0);
    EXPECT_EQ(p.q.strides, contiguous_strides(1, 2, 2, 2));
  }
}

TEST(Fixture, ScaleIsAlwaysWrittenAsANumber) {
  const Problem p = problem_from_json(minimal_json(), "minimal.json");
  const json j = problem_to_json(p);
  ASSERT_TRUE(j["scale"].is_number());
  EXPECT_EQ(j["scale"].get<double>(), Problem::default_scale(2));
}

struct BadCase {
  const char* name;
  const char* field;  // the field the message must name
  std::function<void(json&)> mutate;
};

std::vector<BadCase> bad_cases() {
  return {
      {"wrong_format", "format",
       [](json& j) { j["format"] = "attncheck-problem-2"; }},
      {"format_not_string", "format", [](json& j) { j["format"] = 1; }},
      // Found by fuzzing: a decoded "\r" or "\n" echoed in the message
      // made it two lines.
      {"format_with_line_breaks", "format",
       [](json& j) { j["format"] = "attncheck-\r\nproblem-1"; }},
      {"dtype_with_line_break", "dtype", [](json& j) { j["dtype"] = "f\n64"; }},
      {"missing_format", "format", [](json& j) { j.erase("format"); }},
      {"missing_q", "q", [](json& j) { j.erase("q"); }},
      {"missing_dtype", "dtype", [](json& j) { j.erase("dtype"); }},
      {"missing_batch", "batch", [](json& j) { j.erase("batch"); }},
      {"unknown_dtype", "dtype", [](json& j) { j["dtype"] = "f8"; }},
      {"batch_is_string", "batch", [](json& j) { j["batch"] = "1"; }},
      {"batch_is_fraction", "batch", [](json& j) { j["batch"] = 1.5; }},
      {"tq_is_zero", "tq", [](json& j) { j["tq"] = 0; }},
      {"dk_negative", "dk", [](json& j) { j["dk"] = -2; }},
      {"q_is_object", "q", [](json& j) { j["q"] = json::object(); }},
      {"q_too_short", "q", [](json& j) { j["q"].erase(7); }},
      {"k_too_long", "k", [](json& j) { j["k"].push_back(1); }},
      {"v_element_string", "v", [](json& j) { j["v"][1] = "four"; }},
      {"v_element_null", "v", [](json& j) { j["v"][0] = nullptr; }},
      {"not_representable_f16", "q",
       [](json& j) {
         j["dtype"] = "f16";
         j["q"][2] = 0.1;
       }},
      {"not_representable_bf16", "k",
       [](json& j) {
         j["dtype"] = "bf16";
         j["k"][0] = 1.0 + std::ldexp(1.0, -10);
       }},
      {"kv_heads_not_divisor", "kv_heads", [](json& j) { j["kv_heads"] = 3; }},
      {"key_valid_length", "key_valid",
       [](json& j) {
         j["key_valid"] = {1, 1, 1};
       }},
      {"key_valid_value", "key_valid",
       [](json& j) {
         j["key_valid"] = {1, 2};
       }},
      {"mask_value", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {1, 1, 2, 2}}, {"data", {1, 0, 2, 1}}};
       }},
      {"mask_shape_tq", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {1, 1, 3, 2}}, {"data", {1, 0, 1, 1, 1, 1}}};
       }},
      {"mask_shape_heads", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {1, 3, 2, 2}}, {"data", json::array()}};
       }},
      {"mask_shape_rank", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {2, 2}}, {"data", {1, 1, 1, 1}}};
       }},
      {"mask_data_length", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {1, 1, 2, 2}}, {"data", {1, 1, 1}}};
       }},
      {"mask_not_object", "mask",
       [](json& j) {
         j["mask"] = {1, 1, 1, 1};
       }},
      {"bias_infinite", "bias",
       [](json& j) {
         j["bias"] = {{"shape", {1, 2, 2, 2}},
                      {"data", {0, 0, 0, "inf", 0, 0, 0, 0}}};
       }},
      {"bias_missing_data", "bias",
       [](json& j) {
         j["bias"] = {{"shape", {1, 1, 2, 2}}};
       }},
      {"causal_not_bool", "causal", [](json& j) { j["causal"] = 1; }},
      {"unknown_align", "align", [](json& j) { j["align"] = "center"; }},
      {"align_not_string", "align", [](json& j) { j["align"] = 0; }},
      {"window_length", "window",
       [](json& j) {
         j["window"] = {1, 2, 3};
       }},
      {"window_below_minus_one", "window",
       [](json& j) {
         j["window"] = {-2, 0};
       }},
      {"scale_string", "scale", [](json& j) { j["scale"] = "half"; }},
      {"scale_infinite", "scale", [](json& j) { j["scale"] = "inf"; }},
      {"softcap_negative", "softcap", [](json& j) { j["softcap"] = -1.0; }},
      {"dout_length", "dout",
       [](json& j) {
         j["dout"] = {1, 2};
       }},
      {"misspelled_field", "casual", [](json& j) { j["casual"] = true; }},
  };
}

void expect_one_line_naming(const InputError& e, const std::string& file,
                            const std::string& field) {
  const std::string msg = e.what();
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find(field), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\r'), std::string::npos) << msg;
}

TEST(Fixture, MalformedProblemsNameTheFileAndTheField) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    json j = minimal_json();
    c.mutate(j);
    try {
      problem_from_json(j, "problem.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      expect_one_line_naming(e, "problem.json", c.field);
    }
  }
}

TEST(Fixture, MalformedFilesNameTheFileAndTheField) {
  const fs::path dir = temp_dir("malformed");
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    json j = minimal_json();
    c.mutate(j);
    // Both as a bare problem and inside a fixture.
    for (bool wrapped : {false, true}) {
      const std::string path =
          (dir / (std::string(c.name) + (wrapped ? "_fixture" : "") + ".json"))
              .string();
      json file =
          wrapped ? json{{"format", "attncheck-fixture-1"}, {"problem", j}} : j;
      std::ofstream(path) << file.dump(1);
      if (!wrapped && std::string(c.field) == "format") continue;  // below
      try {
        load_fixture(path);
        ADD_FAILURE() << "accepted " << path;
      } catch (const InputError& e) {
        expect_one_line_naming(e, path, c.field);
      }
    }
  }
  fs::remove_all(dir);
}

TEST(Fixture, FileLevelErrorsNameTheFile) {
  const fs::path dir = temp_dir("file_level");
  auto expect_error = [](const std::string& path, const std::string& field) {
    try {
      load_fixture(path);
      ADD_FAILURE() << "accepted " << path;
    } catch (const InputError& e) {
      expect_one_line_naming(e, path, field);
    }
  };
  const std::string missing = (dir / "missing.json").string();
  expect_error(missing, "cannot open file");

  auto write = [&](const char* name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  };
  expect_error(
      write("not_json.json", "{\"format\": \"attncheck-problem-1\",\n oops}"),
      "JSON");
  expect_error(write("empty.json", ""), "JSON");
  expect_error(write("array.json", "[1, 2]"), "object");
  expect_error(write("no_format.json", "{}"), "format");
  expect_error(
      write("other_format.json", R"({"format": "attncheck-oracle-1"})"),
      "format");
  expect_error(
      write("fixture_no_problem.json", R"({"format": "attncheck-fixture-1"})"),
      "problem");
  json f{{"format", "attncheck-fixture-1"},
         {"problem", minimal_json()},
         {"args", 3}};
  expect_error(write("fixture_bad_args.json", f.dump()), "args");
  f.erase("args");
  f["metadata"] = json::object();
  expect_error(write("fixture_unknown.json", f.dump()), "metadata");
  f.erase("metadata");
  EXPECT_NO_THROW(load_fixture(write("fixture_ok.json", f.dump())));
  fs::remove_all(dir);
}

// Hostile files: sizes, nesting and values a
// reader must refuse with one line naming the file and the field, before
// allocating anything for them. Each case is also a regression test of the
// limits in input_limits.
std::vector<BadCase> hostile_cases() {
  return {
      // tq = 1e9 with a q of 8 numbers: refused on the dimension, not after
      // an attempt to allocate 1e9 * dk doubles.
      {"tq_1e9", "tq", [](json& j) { j["tq"] = 1000000000; }},
      {"tq_1e9_as_double", "tq", [](json& j) { j["tq"] = 1e9; }},
      {"dk_huge_double", "dk", [](json& j) { j["dk"] = 1e300; }},
      {"batch_beyond_int64", "batch",
       [](json& j) { j["batch"] = 18446744073709551615ull; }},
      {"dim_just_above_limit", "dv",
       [](json& j) { j["dv"] = input_limits::kDim + 1; }},
      // Each dim allowed, the score matrix (2^26 elements) is not; refused
      // before the tensors are read.
      {"scores_beyond_limit", "tk",
       [](json& j) {
         j["tq"] = 8192;
         j["tk"] = 8192;
       }},
      {"window_huge", "window",
       [](json& j) {
         j["window"] = {int64_t{1} << 62, 0};
       }},
      {"window_int64_max", "window",
       [](json& j) {
         j["window"] = {0, std::numeric_limits<int64_t>::max()};
       }},
      {"scale_nan", "scale", [](json& j) { j["scale"] = "nan"; }},
      {"softcap_nan", "softcap", [](json& j) { j["softcap"] = "nan"; }},
      {"softcap_inf", "softcap", [](json& j) { j["softcap"] = "inf"; }},
      {"bias_nan", "bias",
       [](json& j) {
         j["bias"] = {{"shape", {1, 1, 2, 2}}, {"data", {0, "nan", 0, 0}}};
       }},
      {"mask_shape_huge", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {1, 1, int64_t{1} << 40, 2}},
                      {"data", json::array()}};
       }},
      {"mask_shape_negative", "mask",
       [](json& j) {
         j["mask"] = {{"shape", {-1, 1, 2, 2}}, {"data", {1, 1, 1, 1}}};
       }},
      {"key_valid_float", "key_valid",
       [](json& j) {
         j["key_valid"] = {1.0, 0.5};
       }},
      {"q_element_object", "q", [](json& j) { j["q"][3] = json::object(); }},
      {"q_element_nested_array", "q",
       [](json& j) {
         j["q"][0] = {1};
       }},
  };
}

TEST(Fixture, HostileProblemsAreRefusedBeforeAllocating) {
  for (const BadCase& c : hostile_cases()) {
    SCOPED_TRACE(c.name);
    json j = minimal_json();
    c.mutate(j);
    try {
      problem_from_json(j, "hostile.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      expect_one_line_naming(e, "hostile.json", c.field);
    }
  }
}

TEST(Fixture, ProblemsAtTheLimitsAreAccepted) {
  // The limits refuse what is beyond them, not what is at them.
  json j = minimal_json();
  j["batch"] = 1;
  j["heads"] = 1;
  j["tq"] = input_limits::kScores / input_limits::kDim;
  j["dk"] = 1;
  j["dv"] = 1;
  j["tk"] = input_limits::kDim;  // scores = 2^24 exactly
  j["q"] = std::vector<double>(static_cast<size_t>(j["tq"].get<int64_t>()), 1.0);
  j["k"] = json::array();
  j["v"] = json::array();
  try {
    problem_from_json(j, "limit.json");
    ADD_FAILURE() << "accepted k without its elements";
  } catch (const InputError& e) {
    // Past the dims and the score limit, refused for the length of k.
    expect_one_line_naming(e, "limit.json", "'k'");
    EXPECT_NE(std::string(e.what()).find("expected 1048576 numbers"),
              std::string::npos)
        << e.what();
  }
  j = minimal_json();
  j["window"] = {input_limits::kWindow, input_limits::kWindow};
  EXPECT_NO_THROW(problem_from_json(j, "limit.json"));
}

// A fixture of `property` around the minimal problem (batch 1, heads 2,
// kv_heads 2, tq 2, tk 2, dk 2, dv 1).
json fixture_json(const std::string& property, json args) {
  return json{{"format", "attncheck-fixture-1"},
              {"problem", minimal_json()},
              {"args", std::move(args)},
              {"meta",
               {{"property", property},
                {"impl", "loop_f64"},
                {"seed", 7},
                {"dtype", "f64"}}}};
}

TEST(Fixture, MetaRecordsTheRunsOptionsTypeChecked) {
  json f = fixture_json("MatchesOracle", json::object());
  // Fixtures saved before the options were recorded read as before.
  EXPECT_NO_THROW(fixture_from_json(f, "old.json"));
  f["meta"]["strict"] = true;
  f["meta"]["profile"] = "thorough";
  f["meta"]["cases"] = 5;
  f["meta"]["timeout_ms"] = 20000;
  const FixtureMeta meta = fixture_from_json(f, "new.json").meta;
  EXPECT_EQ(meta.strict, true);
  EXPECT_EQ(meta.profile, "thorough");
  EXPECT_EQ(meta.cases, 5);
  EXPECT_EQ(meta.timeout_ms, 20000);
  EXPECT_EQ(meta.seed, 7u);
  EXPECT_EQ(meta.property, "MatchesOracle");
  EXPECT_FALSE(meta.path);
  EXPECT_FALSE(meta.baseline_factor);
  const std::pair<const char*, json> bad[] = {
      {"strict", "yes"}, {"profile", "fast"},   {"profile", 1},  {"cases", 0},
      {"cases", 1.5},    {"cases", 100001},     {"timeout_ms", -1}, {"timeout_ms", "1"},
  };
  for (const auto& [key, value] : bad) {
    json g = f;
    g["meta"][key] = value;
    try {
      fixture_from_json(g, "meta.json");
      ADD_FAILURE() << "accepted meta." << key << " = " << value.dump();
    } catch (const InputError& e) {
      expect_one_line_naming(e, "meta.json", std::string("meta.") + key);
    }
  }
}

TEST(Fixture, ArgsValuesAreLeftToTheirProperty) {
  // The reader checks that args is an object; what is inside is what a
  // property drew, checked by that property before replay
  // (tests/properties/test_args.cpp), since only it knows what it reads.
  const json args = {{"row", {7, 0, 0}}, {"something_new", {{"any", "thing"}}}};
  const Fixture f =
      fixture_from_json(fixture_json("CausalPrefixIndependence", args), "ok.json");
  EXPECT_EQ(f.args, args);
  try {
    fixture_from_json(fixture_json("MatchesOracle", json::array()), "case.json");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    expect_one_line_naming(e, "case.json", "'args'");
  }
}

TEST(Fixture, MetaFieldsHaveTheirTypes) {
  const std::vector<std::pair<const char*, json>> cases = {
      {"meta.impl", {{"impl", 3}}},
      {"meta.property", {{"property", nullptr}}},
      {"meta.seed", {{"seed", "42"}}},
      {"meta.seed", {{"seed", -1}}},
      {"meta.seed", {{"seed", 1.5}}},
      {"meta.seed", {{"seed", 9007199254740992ull}}},
      {"meta.path", {{"path", 1}}},
      {"meta.baseline_factor", {{"baseline_factor", "8"}}},
      {"meta", json::array()},
  };
  for (const auto& [field, meta] : cases) {
    SCOPED_TRACE(meta.dump());
    json f = fixture_json("MatchesOracle", json::object());
    f["meta"] = meta;
    try {
      fixture_from_json(f, "meta.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      expect_one_line_naming(e, "meta.json", field);
    }
  }
  // Fields attncheck does not write are kept, as provenance.
  json f = fixture_json("MatchesOracle", json::object());
  f["meta"]["host"] = "ci-7";
  EXPECT_EQ(fixture_from_json(f, "meta.json").meta.other, json({{"host", "ci-7"}}));
}

TEST(Fixture, MetaIsWrittenAsItWasRead) {
  // Every field attncheck writes, and one it does not: the typed meta
  // writes back the object it read (the failure report's fixtures are
  // written through it).
  const json meta = {{"property", "MatchesOracle"}, {"impl", "loop_f64"},   {"dtype", "f64"},
                     {"seed", 7},                   {"reproduce", ""},       {"attncheck", "0.1"},
                     {"strict", true},              {"profile", "thorough"}, {"cases", 5},
                     {"timeout_ms", 20000},         {"path", "fast"},        {"baseline_factor", 2.5},
                     {"host", "ci-7"}};
  json f = fixture_json("MatchesOracle", json::object());
  f["meta"] = meta;
  const Fixture g = fixture_from_json(f, "meta.json");
  EXPECT_EQ(g.meta.path, "fast");
  EXPECT_EQ(g.meta.baseline_factor, 2.5);
  EXPECT_EQ(fixture_meta_to_json(g.meta), meta);
  EXPECT_EQ(fixture_to_json(g)["meta"].dump(), meta.dump());
}

TEST(Fixture, JsonTextLimits) {
  auto expect_error = [](const std::string& text, const std::string& field) {
    try {
      parse_json(text, "text.json");
      ADD_FAILURE() << "accepted " << text.substr(0, 80);
    } catch (const InputError& e) {
      expect_one_line_naming(e, "text.json", field);
    }
  };
  // Deep nesting: refused before nlohmann's recursive printing and freeing
  // could run off the stack.
  expect_error(std::string(100000, '[') + std::string(100000, ']'), "nested");
  expect_error("{\"a\": " + std::string(65, '[') + std::string(65, ']') + "}",
               "nested");
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "x"));
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json("[\"" + std::string(1000, '[') + "\\\"\"]", "x"));
  // A parse error quoting a newline stays on one line.
  expect_error("{\"format\":\n\n tru\ne}", "JSON");
  expect_error("[1e999]", "JSON");
  expect_error("\"\xff\xfe\"", "JSON");
}

TEST(Fixture, EndlessAndBinaryFilesAreRefusedNotReadForever) {
  // A device that never ends: refused as what it is, never read.
  if (fs::exists("/dev/zero")) {
    try {
      load_fixture("/dev/zero");
      ADD_FAILURE() << "accepted /dev/zero";
    } catch (const InputError& e) {
      expect_one_line_naming(e, "/dev/zero", "it is a character device, not a regular file");
    }
  }
  // A regular file's NUL byte is not JSON.
  {
    const fs::path nul_dir = temp_dir("nul");
    const std::string nul = (nul_dir / "nul.json").string();
    std::ofstream(nul, std::ios::binary) << std::string("{\"a\"", 4) << '\0' << "}";
    try {
      load_fixture(nul);
      ADD_FAILURE() << "accepted a NUL byte";
    } catch (const InputError& e) {
      expect_one_line_naming(e, nul, "NUL byte at offset 4");
    }
    fs::remove_all(nul_dir);
  }
  // A stream of spaces is read up to the size limit, then refused (a small
  // limit here; input_limits::kFileBytes in use).
  const fs::path dir = temp_dir("endless");
  const std::string path = (dir / "spaces.json").string();
  std::ofstream(path) << std::string(3 << 16, ' ') << "{}";
  try {
    read_json_file(path, 1 << 17);
    ADD_FAILURE() << "accepted a file above the limit";
  } catch (const InputError& e) {
    expect_one_line_naming(e, path, "more than the limit of 2^17 bytes");
  }
  EXPECT_TRUE(read_json_file(path, 1 << 18).is_object());
  fs::remove_all(dir);
}

TEST(Fixture, SaveFailsWithInputError) {
  const fs::path dir = temp_dir("save_fail");
  const fs::path blocker = dir / "file";
  std::ofstream(blocker) << "x";
  Fixture f;
  f.problem = full_problem();
  // A regular file where a parent directory should be.
  EXPECT_THROW(save_fixture((blocker / "sub" / "case.json").string(), f),
               InputError);
  fs::remove_all(dir);
}

TEST(Fixture, SaveRefusesAFifoWithoutOpeningIt) {
  const fs::path dir = temp_dir("save_fifo");
  const fs::path fifo = dir / "case.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A reader, so that code which opened the FIFO would not block the test.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  Fixture f;
  f.problem = full_problem();
  try {
    save_fixture(fifo.string(), f);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "fixture: cannot write '" + fifo.string() + "': it is a FIFO, not a regular file");
  }
  char c;
  EXPECT_EQ(::read(reader, &c, 1), 0) << "the FIFO was written";
  ::close(reader);
  fs::remove_all(dir);
}

TEST(Fixture, SeedFilesLoad) {
  const std::string dir = std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures/";
  const Fixture e = load_fixture(dir + "seed_exercise1.json");
  EXPECT_EQ(e.problem.tq, 2);
  EXPECT_EQ(e.problem.tk, 2);
  EXPECT_EQ(e.problem.scale, Problem::default_scale(2));
  EXPECT_EQ(e.problem.v.data, (std::vector<double>{2, 0, 0, 4}));
  EXPECT_TRUE(e.expected.is_null());
  EXPECT_TRUE(e.args.empty());

  const Fixture a = load_fixture(dir + "seed_exercise1_asymmetric.json");
  ASSERT_EQ(a.problem.tq, 2);
  ASSERT_EQ(a.problem.tk, 3);
  // The point of the companion: scores that are not symmetric, so that a
  // softmax over the query axis gives other weights.
  const OracleResult r = oracle(a.problem);
  EXPECT_NE(r.scores[weight_index(a.problem, 0, 0, 0, 1)],
            r.scores[weight_index(a.problem, 0, 0, 1, 0)]);
  for (int64_t j = 0; j < 3; ++j) {
    const double col_sum = r.weights[weight_index(a.problem, 0, 0, 0, j)] +
                           r.weights[weight_index(a.problem, 0, 0, 1, j)];
    EXPECT_GT(std::fabs(col_sum - 1.0), 0.1) << "column " << j;
  }
}

// Every fixture kept in the tree: its typed meta writes back the object
// the file holds, and the file saved again is the same bytes (they were
// written by save_fixture, through the failure report's meta).
TEST(Fixture, StoredFixturesWriteBackAsTheyAre) {
  int fixtures = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(std::string(ATTNCHECK_SOURCE_DIR) + "/fixtures")) {
    const std::string path = entry.path().string();
    if (!entry.is_regular_file() || !path.ends_with(".json")) continue;
    const json raw = read_json_file(path);
    if (!raw.is_object() || raw.value("format", "") != "attncheck-fixture-1") continue;
    SCOPED_TRACE(path);
    ++fixtures;
    const Fixture f = load_fixture(path);
    EXPECT_EQ(fixture_meta_to_json(f.meta), raw.at("meta"));
    const fs::path copy = temp_dir("stored") / "copy.json";
    save_fixture(copy.string(), f);
    std::ifstream a(path), b(copy);
    const std::string bytes_a{std::istreambuf_iterator<char>(a), {}};
    const std::string bytes_b{std::istreambuf_iterator<char>(b), {}};
    EXPECT_EQ(bytes_b, bytes_a);
  }
  EXPECT_GE(fixtures, 9);
}

TEST(Fixture, OracleJsonOfExercise1) {
  const Fixture e = load_fixture(std::string(ATTNCHECK_SOURCE_DIR) +
                                 "/fixtures/seed_exercise1.json");
  const json j = oracle_to_json(e.problem, oracle(e.problem));
  EXPECT_EQ(j["format"], "attncheck-oracle-1");
  for (const char* key :
       {"out", "weights", "lse", "empty_rows", "uncertified"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"dq", "dk", "dv", "note"})
    EXPECT_FALSE(j.contains(key)) << key;
  ASSERT_EQ(j["out"].size(), 4u);
  EXPECT_NEAR(j["out"][0].get<double>(), 1.3395, 5e-5);
  EXPECT_EQ(j["weights"].size(), 4u);
  EXPECT_EQ(j["lse"].size(), 2u);
  EXPECT_TRUE(j["empty_rows"].empty());
  EXPECT_TRUE(j["uncertified"].empty());
}

TEST(Fixture, OracleJsonOfEmptyRowsAndGradients) {
  Problem p = problem_from_json(minimal_json(), "minimal.json");
  p.key_valid = {0, 0};
  p.dout.assign(4, 1.0);
  const json j = json::parse(oracle_to_json(p, oracle(p)).dump());
  EXPECT_EQ(j["lse"], json({"-inf", "-inf", "-inf", "-inf"}));
  EXPECT_EQ(j["empty_rows"],
            json({{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}}));
  for (const auto& x : j["out"]) EXPECT_EQ(x.get<double>(), 0.0);
  // Empty rows contribute nothing to any gradient: all exactly zero.
  for (const char* key : {"dq", "dk", "dv"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    ASSERT_TRUE(j[key].is_array()) << key;
    EXPECT_EQ(j[key].size(), std::string_view(key) == "dv" ? 4u : 8u) << key;
    for (const auto& x : j[key]) EXPECT_EQ(x.get<double>(), 0.0) << key;
  }
  EXPECT_FALSE(j.contains("note"));
}

TEST(Fixture, OracleJsonHasTheGradientsAndTheUncertifiedList) {
  Problem p = problem_from_json(minimal_json(), "minimal.json");
  p.dout = {1.0, -2.0, 0.5, 3.0};
  OracleResult r = oracle(p);
  r.uncertified.push_back({"dk", {0, 1, 0, 1}});
  const json j = json::parse(oracle_to_json(p, r).dump());
  for (const char* key : {"dq", "dk", "dv"}) ASSERT_TRUE(j[key].is_array());
  ASSERT_EQ(j["dq"].size(), r.dq.size());
  for (size_t i = 0; i < r.dq.size(); ++i)
    EXPECT_EQ(j["dq"][i].get<double>(), r.dq[i]);
  ASSERT_EQ(j["dk"].size(), r.dk.size());
  ASSERT_EQ(j["dv"].size(), r.dv.size());
  for (size_t i = 0; i < r.dv.size(); ++i)
    EXPECT_EQ(j["dv"][i].get<double>(), r.dv[i]);
  EXPECT_EQ(j["uncertified"], json::parse(R"([["dk", 0, 1, 0, 1]])"));
}

}  // namespace
}  // namespace attncheck
