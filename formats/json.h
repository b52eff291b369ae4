#pragma once
// The JSON of the formats room (SPEC 5.3), for the rooms above it: reading
// JSON text within the input limits, numbers that read back bit-exactly,
// and the problem, fixture and oracle objects. Not installed: a library
// user loads and saves fixtures through attncheck/fixture.h.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attncheck/fixture.h"
#include "attncheck/oracle.h"
#include "attncheck/problem.h"

namespace attncheck {

/// What a file may ask for, checked before anything is allocated for it, so
/// that a hostile or mistyped file (tq = 1e9) is an InputError naming the
/// field instead of an allocation failure, an out-of-memory kill or an
/// oracle run of days. Far beyond the harness's own problems (dims below
/// 100, the oracle's largest a few thousand scores).
namespace input_limits {
/// Bytes of one JSON file (problem, fixture, report, expected failures).
inline constexpr int64_t kFileBytes = int64_t{1} << 28;  // 256 MiB
/// Nesting of arrays and objects in one JSON file (the formats need 4;
/// the limit keeps recursive printing and freeing off the stack's end).
inline constexpr int kJsonDepth = 64;
/// Each of batch, heads, kv_heads, tq, tk, dk, dv.
inline constexpr int64_t kDim = int64_t{1} << 20;
/// Elements of each tensor (q, k, v, dout, key_valid, mask, bias, and the
/// arrays of a fixture's args): 512 MiB as doubles.
inline constexpr int64_t kTensorElements = int64_t{1} << 26;
/// Scores, batch * heads * tq * tk: what the oracle and every
/// implementation store per element (the oracle about 80 bytes, 1.3 GiB
/// here, and about a minute and a half on one core).
inline constexpr int64_t kScores = int64_t{1} << 24;
/// Magnitude of a window bound (-1 = unbounded): key-position arithmetic
/// stays far from int64 overflow.
inline constexpr int64_t kWindow = int64_t{1} << 53;
}  // namespace input_limits

namespace formats {
/// The binary subtype of a tensor parse_json packed: its doubles' bytes.
inline constexpr std::uint64_t kPackedNumbers = 0x6e756d73;  // "nums"
}  // namespace formats

/// Parses JSON text within input_limits (size, nesting; a key twice in one
/// object is refused). With `pack_tensors`, each of a problem's tensors (q,
/// k, v, dout of the root object or of its "problem") that holds only
/// numbers is a binary value of subtype formats::kPackedNumbers, the
/// doubles' bytes, which problem_from_json reads (and empties: it is read
/// once): a fixture's memory is then about its data's, not the DOM's four
/// times that. Throws InputError "WHERE: ..." in one line.
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          bool pack_tensors = false);

/// Reads and parses a JSON file within input_limits (at most `max_bytes`)
/// through read_input_file (formats/input_file.h): a FIFO, socket, device
/// or directory is refused at once, never opened for reading; throws
/// InputError "PATH: ..." in one line (cannot open, not a regular file, too
/// large, not valid JSON).
nlohmann::json read_json_file(const std::string& path,
                              int64_t max_bytes = input_limits::kFileBytes,
                              bool pack_tensors = false);

/// A JSON value in at most 40 characters on one line, for error messages.
std::string json_brief(const nlohmann::json& j);

/// "number", "string", "array", ...: a JSON value's type for error messages.
std::string json_type_name(const nlohmann::json& j);

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

/// A fixture's "meta" object: the fields FixtureMeta records, and `other`'s.
nlohmann::json fixture_meta_to_json(const FixtureMeta& meta);

/// An "attncheck-fixture-1" object.
nlohmann::json fixture_to_json(const Fixture& f);

/// Parses a problem or a fixture (a problem becomes a fixture with empty
/// args and meta); validates the problem, the fixture's meta (each field
/// of FixtureMeta has its type, a seed below 2^53, cases and timeout_ms in
/// range) and that args is an object. The values of args are the
/// property's to check (PropertyDef::validate_args, before replay). Throws
/// InputError naming `where` and the field.
Fixture fixture_from_json(const nlohmann::json& j, const std::string& where);

/// The "attncheck-oracle-1" object for a problem and its oracle result.
nlohmann::json oracle_to_json(const Problem& p, const OracleResult& r);

}  // namespace attncheck
