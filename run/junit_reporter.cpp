// The JUnit reporter: --junit, one testsuite per implementation, one
// testcase per property and dtype, for CI test reporters.

#include <algorithm>

#include <fmt/format.h>

#include "formats/output_file.h"
#include "attncheck/reporters.h"
#include "attncheck/registry.h"
#include "core/text.h"

namespace attncheck {

namespace {

// The length of the valid UTF-8 sequence XML 1.0 allows at s[i], or 0:
// well-formed UTF-8 (core/text.h) of a character XML admits (no C0 control
// but tab, newline and carriage return; not U+FFFE or U+FFFF).
size_t xml_char_length(std::string_view s, size_t i) {
  char32_t cp = 0;
  const size_t n = utf8_sequence(s, i, &cp);
  if (n == 0) return 0;
  if (cp < 0x20) return cp == '\t' || cp == '\n' || cp == '\r' ? 1 : 0;
  return cp == 0xFFFE || cp == 0xFFFF ? 0 : n;
}

}  // namespace

std::string xml_escape(std::string_view s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = xml_char_length(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    const char c = s[i];
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&apos;";
    else if (attribute && c == '\n') out += "&#10;";
    else if (attribute && c == '\r') out += "&#13;";
    else if (attribute && c == '\t') out += "&#9;";
    else if (c == '\r') out += "&#13;";  // a parser would turn CR LF into LF
    else out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

JunitReporter::JunitReporter(std::string path, std::string label)
    : path_(std::move(path)), label_(std::move(label)) {
  check_output_path(path_, label_);
}

void JunitReporter::on_start(uint64_t seed, Profile profile, const Shard&) {
  seed_ = seed;
  profile_ = profile;
  last_ = std::chrono::steady_clock::now();
}

void JunitReporter::on_outcome(const PropertyOutcome& outcome) {
  const auto now = std::chrono::steady_clock::now();
  outcomes_.emplace_back(outcome, std::chrono::duration<double>(now - last_).count());
  last_ = now;
}

void JunitReporter::on_finish(const SessionResult&) {
  const auto is_failure = [](PropertyStatus s) {
    return s == PropertyStatus::failed || s == PropertyStatus::xpass;
  };
  const auto is_skipped = [&](PropertyStatus s) {
    return !is_failure(s) && s != PropertyStatus::passed;
  };
  // Suites by implementation, in the order their first outcome came.
  std::vector<std::string> suites;
  for (const auto& [o, seconds] : outcomes_)
    if (std::find(suites.begin(), suites.end(), o.impl) == suites.end()) suites.push_back(o.impl);

  const auto count = [&](const std::string* impl, auto pred) {
    return std::count_if(outcomes_.begin(), outcomes_.end(), [&](const auto& entry) {
      return (!impl || entry.first.impl == *impl) && pred(entry.first.status);
    });
  };
  const auto any = [](PropertyStatus) { return true; };
  const auto seconds_of = [&](const std::string* impl) {
    double total = 0;
    for (const auto& [o, seconds] : outcomes_)
      if (!impl || o.impl == *impl) total += seconds;
    return total;
  };
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format(
      "<testsuites name=\"attncheck\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
      "skipped=\"{}\" time=\"{:.3f}\">\n",
      outcomes_.size(), count(nullptr, is_failure), count(nullptr, is_skipped), seconds_of(nullptr));
  for (const std::string& impl : suites) {
    xml += fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
        "time=\"{:.3f}\">\n",
        xml_escape(impl, true), count(&impl, any), count(&impl, is_failure),
        count(&impl, is_skipped), seconds_of(&impl));
    xml += "    <properties>\n";
    xml += fmt::format("      <property name=\"seed\" value=\"{}\"/>\n", seed_);
    xml += fmt::format("      <property name=\"profile\" value=\"{}\"/>\n", profile_name(profile_));
    xml += fmt::format("      <property name=\"attncheck\" value=\"{}\"/>\n",
                       xml_escape(version(), true));
    xml += "    </properties>\n";
    for (const auto& [o, seconds] : outcomes_) {
      if (o.impl != impl) continue;
      xml += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"",
                         xml_escape(fmt::format("attncheck.{}.{}", o.impl, dtype_name(o.dtype)), true),
                         xml_escape(o.property, true), seconds);
      const std::string first_line = o.message.substr(0, o.message.find('\n'));
      if (is_failure(o.status)) {
        xml += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
                           xml_escape(first_line, true), status_name(o.status),
                           xml_escape(o.message, false));
      } else if (is_skipped(o.status)) {
        // An xfail by cause is skipped with its finding's reason.
        const std::string why =
            o.status == PropertyStatus::xfail && o.expected
                ? fmt::format("xfail: known finding {} ({}): {}", o.expected->finding,
                              o.expected->cause, o.expected->reason)
                : fmt::format("{}: {}", status_name(o.status), first_line);
        xml += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                           xml_escape(why, true));
      } else {
        xml += "/>\n";
      }
    }
    xml += "  </testsuite>\n";
  }
  xml += "</testsuites>\n";
  write_output_file(path_, xml, label_);
}

}  // namespace attncheck
