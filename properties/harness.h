#pragma once
// Machinery shared by the properties: calling an implementation safely,
// recording a case's verdict, and running a RapidCheck property to an
// outcome with a failure report and a fixture.

#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "attncheck/compare.h"
#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/tolerance.h"
#include "properties/gen/problem_gen.h"

namespace attncheck {

/// State of one property run, handed to the property's body for each case.
class CaseContext {
 public:
  CaseContext(const Implementation& impl, DType dtype, const RunConfig& config)
      : impl_(impl), dtype_(dtype), config_(config) {}

  const Implementation& impl() const { return impl_; }
  const ImplInfo& info() const { return impl_.info(); }
  DType dtype() const { return dtype_; }
  const RunConfig& config() const { return config_; }
  /// The generator spec of the implementation in this dtype.
  gen::GenSpec spec() const { return gen::spec_for(info(), dtype_); }

  /// Calls forward. An exception thrown by the implementation is a failure
  /// of this case; ATTNCHECK_UNSUPPORTED discards it.
  ForwardResult call(const Problem& p);

  /// Like call(), and a reported error is a failure too.
  ForwardResult call_ok(const Problem& p);

  /// The oracle and tolerances of p; discards the case when any row is
  /// ill-conditioned (SPEC 4: counted, never passed).
  std::pair<OracleResult, Tolerances> reference(const Problem& p);

  /// Fails the case when the comparison failed, else records its budget.
  void expect(const Problem& p, const Comparison& c, const std::string& what,
              nlohmann::json args = nlohmann::json::object());

  /// Fails the case: records problem, message and args, then throws.
  [[noreturn]] void fail(const Problem& p, const std::string& message,
                         nlohmann::json args = nlohmann::json::object());

  /// Discards the case, counted under `reason`.
  [[noreturn]] void discard(const std::string& reason);

  /// Records a passing case's budget used.
  void passed(double budget_used);

  // Filled while running, read by run_cases().
  int cases = 0;
  int discarded = 0;
  std::map<std::string, int> discard_reasons;
  double max_budget_used = 0;
  std::optional<Problem> failed_problem;
  std::string failure_message;
  nlohmann::json failure_args;

 private:
  const Implementation& impl_;
  DType dtype_;
  const RunConfig& config_;
};

/// Runs `body` as a RapidCheck property for `prop` (seeded from the run's
/// seed and the names), then turns the result into an outcome: the failure
/// report with the shrunk problem, seed, reproduce string and saved fixture.
PropertyOutcome run_cases(const PropertyDef& prop, const Implementation& impl,
                          DType dtype, const RunConfig& config,
                          const std::function<void(CaseContext&)>& body);

/// Runs a non-RapidCheck (statistical) property body that returns its own
/// outcome fields; shared bookkeeping (names, exceptions) is done here.
PropertyOutcome run_once(const PropertyDef& prop, const Implementation& impl,
                         DType dtype,
                         const std::function<void(PropertyOutcome&)>& body);

/// The problem printed for a person: shapes and flags, and for small cases
/// the matrices.
std::string describe_problem(const Problem& p);

/// The number of cases a property runs under a config.
int case_budget(const PropertyDef& prop, const RunConfig& config);

/// Skip reason for properties that read weights from implementations that
/// do not return them.
std::optional<std::string> needs_weights(const ImplInfo& info);

// The catalog's entries, one function per property, defined in the file of
// its family.
PropertyDef matches_oracle_property();
PropertyDef constant_values_property();
PropertyDef row_sums_property();
PropertyDef masked_weights_property();
PropertyDef permutation_property();
PropertyDef variance_property();
PropertyDef empty_rows_property();

}  // namespace attncheck
