#pragma once
// Problem, fixture and oracle files (SPEC section 5.3), as JSON.

#include <string>

#include <nlohmann/json.hpp>

#include "attncheck/oracle.h"
#include "attncheck/problem.h"

namespace attncheck {

/// A saved counterexample: the problem, what the property needs beyond it,
/// the expected values (or null) and where it came from.
struct Fixture {
  Problem problem;
  nlohmann::json args = nlohmann::json::object();
  nlohmann::json expected = nullptr;
  nlohmann::json meta = nlohmann::json::object();  ///< property, impl, dtype,
                                                   ///< seed, reproduce, attncheck
};

/// A double as JSON: a number that reads back bit-exactly, or the strings
/// "inf", "-inf", "nan".
nlohmann::json number_to_json(double x);

/// Reads a number written by number_to_json; throws InputError naming
/// `where` otherwise.
double number_from_json(const nlohmann::json& j, const std::string& where);

/// An "attncheck-problem-1" object.
nlohmann::json problem_to_json(const Problem& p);

/// Parses an "attncheck-problem-1" object (optional fields take their
/// defaults, a null scale is the default scale); validates it. Throws
/// InputError naming `where` and the field.
Problem problem_from_json(const nlohmann::json& j, const std::string& where);

/// An "attncheck-fixture-1" object.
nlohmann::json fixture_to_json(const Fixture& f);

/// Reads a file holding either a problem or a fixture (a problem becomes a
/// fixture with empty args and meta). Throws InputError naming the file and
/// the field.
Fixture load_fixture(const std::string& path);

/// Writes a fixture, creating parent directories; throws InputError.
void save_fixture(const std::string& path, const Fixture& f);

/// The "attncheck-oracle-1" object for a problem and its oracle result.
nlohmann::json oracle_to_json(const Problem& p, const OracleResult& r);

}  // namespace attncheck
