#pragma once
// A property as the engine runs it (SPEC section 2): the public
// PropertyInfo (attncheck/properties.h) with its functions over the
// properties room's own types (Case, CaseContext), and the catalog of them.
// Only properties/, run/ and the harness's tests include it; everything
// above uses PropertyInfo and run/'s entry points.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/outcome.h"
#include "attncheck/properties.h"

namespace attncheck {

struct Case;
class CaseContext;
struct Fixture;

/// Draws a case with RapidCheck generators (only inside a property run).
using DrawFn = std::function<Case(CaseContext&)>;
/// Judges a case: returns after ctx.passed(), or fails / discards (throws).
using JudgeFn = std::function<void(CaseContext&, const Case&)>;
/// Why a property does not apply to an implementation in a dtype, or
/// nullopt when it does.
using SkipFn = std::function<std::optional<std::string>(const ImplInfo&, DType)>;
/// Checks a fixture's args before replay judges them (PropertyDef::validate_args).
using ValidateArgsFn = std::function<void(const Fixture&)>;
/// Why a problem is no case of a property (PropertyDef::not_a_case), or
/// nullopt when it is one.
using NotACaseFn = std::function<std::optional<std::string>(const Problem&)>;

/// A property's verdict on an implementation object before any case: a
/// property for layers skips an implementation that is not one.
struct ObjectVerdict {
  PropertyStatus status;
  std::string message;
};

/// A property of the catalog, with what the engine needs to run it beyond
/// the PropertyInfo a user sees (name, statement, default cases, real
/// sizes, position). It is one of two forms: checked case by case (draw
/// and judge: the engine, run/, draws and shrinks cases with RapidCheck,
/// runs the real-size phase and replays fixtures), or run whole (a
/// statistical test with no single case: `run_whole`). Each family file of
/// properties/ registers its properties (ATTNCHECK_REGISTER_PROPERTY in
/// properties/case_context.h); the engine knows none by name.
struct PropertyDef : PropertyInfo {
  /// Why the property does not apply to this implementation and dtype, or
  /// nullopt when it does (empty: it always applies).
  SkipFn skip_reason;
  /// Draws and judges a case (case properties; empty for run_whole).
  DrawFn draw;
  JudgeFn judge;
  /// A statistical property's whole run, filling the outcome (empty for
  /// case properties).
  std::function<void(const Implementation&, DType, const RunConfig&, PropertyOutcome&)> run_whole;
  /// Checks the fixture's args that replay reads against its problem (a
  /// row inside it, permutations of 0..tq-1, ...), so that a hostile
  /// fixture cannot make the judge index outside the problem. Throws
  /// InputError "field 'args.KEY': ..."; empty when the property reads no
  /// args.
  ValidateArgsFn validate_args;
  /// Why a problem is no case of this property (SPEC 3: rows have an
  /// allowed key, except EmptyRowsAreRejected's; a causal property's
  /// problem is causal...), or nullopt. Replay refuses a fixture whose
  /// problem is none (its label is a claim), and a shrink pass never keeps
  /// one. case_property sets rows_have_keys; a family adds its own rule.
  NotACaseFn not_a_case;
  /// The keys of the case's args that name a slice of the problem (a row, a
  /// batch entry, a head): a case carrying one keeps every slice when
  /// shrunk (run/shrink_passes.cpp).
  std::vector<std::string> slice_args;
  /// A verdict on the implementation object before any case, or nullopt
  /// to go on (empty: always go on).
  std::function<std::optional<ObjectVerdict>(const Implementation&)> object_verdict;
  /// It judges the real-size shapes beyond the declared precision (SPEC 3:
  /// AsAccurateAsBaseline's subject), which every other property discards:
  /// the real-size summary counts them among the judged.
  bool judges_beyond_precision = false;

  /// A case property (draw and judge), not a statistical one.
  bool has_cases() const { return static_cast<bool>(judge); }
};

/// The catalog with each property's functions: the PropertyDef of every
/// entry of property_catalog(), in the same order.
const std::vector<PropertyDef>& property_defs();

/// The property with this name, or nullptr.
const PropertyDef* find_property_def(std::string_view name);

/// The catalog's property `info` names; throws InputError "unknown
/// property 'NAME'" for a name the catalog does not hold.
const PropertyDef& property_def(const PropertyInfo& info);

}  // namespace attncheck
