#pragma once
// Checks of a fixture's args (what a property drew beyond the problem)
// against its problem, shared by the properties that read them: each
// property validates the args it reads before its judge indexes with them,
// so that replaying a hostile fixture cannot read outside the problem.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attncheck/fixture.h"
#include "attncheck/problem.h"

namespace attncheck {

/// Checks one fixture's args: the checks of one arg's value apply when it is
/// present; required() refuses the absent ones the judge reads. Every error
/// is an InputError "field 'args.KEY': what" in one line; the caller
/// prefixes the file.
class ArgsCheck {
 public:
  /// Args of a fixture of problem `p`; both must outlive the check. `keys`
  /// are every arg the property writes: any other key is refused here
  /// ("not an arg of this property"), so a fixture cannot carry a field
  /// that reads as meaningful and is silently ignored.
  ArgsCheck(const nlohmann::json& args, const Problem& p,
            std::initializer_list<std::string_view> keys);

  const Problem& problem() const { return p_; }

  /// The arg, or nullptr when absent.
  const nlohmann::json* find(std::string_view key) const;

  /// Each of `keys` is present ("missing" otherwise): the judges index
  /// them, so a fixture without one is refused here, in one line.
  void required(std::initializer_list<std::string_view> keys) const;

  /// Throws the InputError of `key`.
  [[noreturn]] void error(std::string_view key, const std::string& what) const;

  /// An integer in [lo, hi); `what` names it in the error ("b", "index").
  /// Returns it, for checks that depend on it.
  int64_t integer_in(std::string_view key, const nlohmann::json& v, int64_t lo, int64_t hi,
                     std::string_view what) const;

  /// A row [b, h, i] of the problem.
  void row(std::string_view key) const;

  /// A permutation of 0..n-1, n the problem's `dim` ("tq" or "tk").
  void permutation(std::string_view key, int64_t n, std::string_view dim) const;

  /// A finite JSON number.
  void finite_number(std::string_view key) const;

  /// `count` finite JSON numbers.
  void finite_numbers(std::string_view key, int64_t count) const;

  /// A JSON string.
  void string(std::string_view key) const;

  /// One of the given strings.
  void one_of(std::string_view key, std::initializer_list<std::string_view> names) const;

  /// An integer in [lo, hi).
  void integer(std::string_view key, int64_t lo, int64_t hi, std::string_view what) const;

  /// Element count of an array of `key` with shape `dims` (each >= 1),
  /// refused past input_limits::kTensorElements before any product can
  /// overflow.
  int64_t elements(std::string_view key, std::initializer_list<int64_t> dims) const;

 private:
  const nlohmann::json& args_;
  const Problem& p_;
};

/// Refuses every arg of a fixture whose property writes none (replay of a
/// property without a validator).
void refuse_args(const Fixture& f, std::string_view property);

/// The fixture validator of a property whose one arg is the row it judges,
/// "row": [b, h, i] inside the problem (MaskedWeightsAreZero,
/// CausalPrefixIndependence, WindowLocality).
void validate_row_arg(const Fixture& f);

}  // namespace attncheck
