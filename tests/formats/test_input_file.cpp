// Input files (formats/input_file.h): only regular files are read; a FIFO
// without a writer, a socket, a device or a directory is refused at once,
// never opened for reading, and a file above the limit before it is read.
// And the packed reading of a problem's tensors (parse_json's
// pack_tensors): the same values and the same errors, naming the field, as
// the DOM's, and a fixture's memory within a small multiple of its data.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/input_file.h"
#include "formats/json.h"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir() {
  const fs::path d = fs::temp_directory_path() / ("attncheck-in-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The message of the InputError `f` throws, or "" when it throws none.
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(InputFile, ARegularFileIsReadWhole) {
  const fs::path dir = fresh_dir();
  const std::string path = (dir / "a.json").string();
  std::ofstream(path) << "{\"x\": 1}";
  EXPECT_EQ(read_input_file(path, 100), "{\"x\": 1}");
  std::ofstream(dir / "empty.json");
  EXPECT_EQ(read_input_file((dir / "empty.json").string(), 100), "");
  EXPECT_EQ(refusal([&] { read_input_file(path, 4); }),
            path + ": cannot read: 8 bytes, more than the limit of 2^2 bytes");
  fs::remove_all(dir);
}

TEST(InputFile, AFifoWithoutAWriterIsRefusedAtOnce) {
  const fs::path dir = fresh_dir();
  const std::string fifo = (dir / "in.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: an open() without O_NONBLOCK would block here for ever
  // (the test's timeout would end it).
  EXPECT_EQ(refusal([&] { read_input_file(fifo, 100); }),
            fifo + ": cannot read: it is a FIFO, not a regular file");
  EXPECT_EQ(refusal([&] { load_fixture(fifo); }),
            fifo + ": cannot read: it is a FIFO, not a regular file");
  EXPECT_EQ(refusal([&] { read_json_file(fifo); }),
            fifo + ": cannot read: it is a FIFO, not a regular file");
  fs::remove_all(dir);
}

TEST(InputFile, SocketsDevicesAndDirectoriesAreRefused) {
  const fs::path dir = fresh_dir();
  const std::string sock = (dir / "s.json").string();
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(refusal([&] { read_input_file(sock, 100); }),
            sock + ": cannot read: it is a socket, not a regular file");
  ::close(s);
  EXPECT_EQ(refusal([&] { read_input_file("/dev/null", 100); }),
            "/dev/null: cannot read: it is a character device, not a regular file");
  EXPECT_EQ(refusal([&] { read_input_file(dir.string(), 100); }),
            dir.string() + ": cannot read: it is a directory");
  const std::string missing = (dir / "missing.json").string();
  EXPECT_EQ(refusal([&] { read_input_file(missing, 100); }),
            missing + ": cannot open file: No such file or directory");
  fs::remove_all(dir);
}

// A problem file's text with q given as `q`.
std::string problem_text(const std::string& q) {
  return R"({"format": "attncheck-problem-1", "dtype": "f64", "batch": 1, "heads": 1,
  "tq": 2, "tk": 2, "dk": 2, "dv": 2, "q": )" +
         q + R"(, "k": [1, 0, 0, 1], "v": [1, 2, 3, 4]})";
}

TEST(PackedTensors, HoldTheValuesTheDomReads) {
  for (const std::string q : {"[1, -0.0, 2.5e-310, 9007199254740993]", "[\"inf\", \"-inf\", \"nan\", 0.1]"}) {
    const json packed = parse_json(problem_text(q), "p.json", true);
    ASSERT_TRUE(packed["q"].is_binary()) << q;
    EXPECT_TRUE(packed["k"].is_binary());
    EXPECT_TRUE(parse_json(problem_text(q), "p.json")["q"].is_array());
    const Problem a = problem_from_json(packed, "p.json");
    const Problem b = problem_from_json(parse_json(problem_text(q), "p.json"), "p.json");
    ASSERT_EQ(a.q.data.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      const double x = a.q.data[i], y = b.q.data[i];
      EXPECT_TRUE((std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0) << q << i;
    }
    EXPECT_EQ(a.v.data, b.v.data);
  }
  // A fixture's problem is packed too, and nothing outside the problem.
  const json fixture = parse_json(R"({"format": "attncheck-fixture-1", "problem": )" +
                                      problem_text("[1, 2, 3, 4]") +
                                      R"(, "args": {"v": [1, 2]}, "expected": {"q": [1]}})",
                                  "f.json", true);
  EXPECT_TRUE(fixture["problem"]["q"].is_binary());
  EXPECT_TRUE(fixture["args"]["v"].is_array());
  EXPECT_TRUE(fixture["expected"]["q"].is_array());
}

TEST(PackedTensors, ErrorsNameTheFileAndTheFieldAsTheDomsDo) {
  const auto error = [](const std::string& q) {
    return refusal([&] { problem_from_json(parse_json(problem_text(q), "p.json", true), "p.json"); });
  };
  EXPECT_EQ(error("[1, 2, 3]"), "p.json: field 'q': expected 4 numbers, got 3");
  EXPECT_EQ(error("[1, 2, 3, 4, 5]"), "p.json: field 'q': expected 4 numbers, got 5");
  // An element that is no number: the array after all, the element named.
  EXPECT_EQ(error("[1, 2, \"x\", 4]"),
            "p.json: field 'q': element 2: expected a number or \"inf\", \"-inf\", \"nan\", got \"x\"");
  EXPECT_EQ(error("[1, [2], 3, 4]"),
            "p.json: field 'q': element 1: expected a number or \"inf\", \"-inf\", \"nan\", got [2]");
  EXPECT_EQ(error("[1, 2, true, {}]"),
            "p.json: field 'q': element 2: expected a number or \"inf\", \"-inf\", \"nan\", got true");
  EXPECT_EQ(error("[1, null, 3, 4]"),
            "p.json: field 'q': element 1: expected a number or \"inf\", \"-inf\", \"nan\", got null");
  EXPECT_EQ(error("[1, 2, 3, 1e999]").rfind("p.json: not valid JSON: ", 0), 0u);
  EXPECT_EQ(error("[1, 2, 3, 4], \"q\": [1, 2, 3, 4]"), "p.json: key \"q\" appears twice in one object");
}

// Peak resident memory of loading `path` in a child process, in MiB.
long child_peak_mib(const std::string& path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      const Fixture f = load_fixture(path);
      ::_exit(f.problem.q.data.empty() ? 3 : 0);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  return usage.ru_maxrss / 1024;
}

TEST(PackedTensors, AFixturesMemoryIsASmallMultipleOfItsData) {
  // A sanitizer's shadow memory and quarantine count in the peak (build-asan
  // measured 163 MiB): the bound is the plain build's.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "resident memory is the sanitizer's too";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
  GTEST_SKIP() << "resident memory is the sanitizer's too";
#endif
#endif
  // 2^22 zeros in q (32 MiB as doubles, 8 MiB of text): the DOM alone
  // would take 64 MiB for q's nodes.
  const fs::path dir = fresh_dir();
  const std::string path = (dir / "big.json").string();
  {
    std::ofstream out(path);
    out << R"({"format": "attncheck-problem-1", "dtype": "f64", "batch": 1, "heads": 1,
      "tq": 4, "tk": 1, "dk": 1048576, "dv": 1, "v": [0], "q": [0)";
    for (int i = 1; i < (1 << 22); ++i) out << ",0";
    out << R"(], "k": [0)";
    for (int i = 1; i < (1 << 20); ++i) out << ",0";
    out << "]}";
  }
  const long peak = child_peak_mib(path);
  // Data 40 MiB as doubles, text 10 MiB, the test program's own few MiB:
  // packed, about 100 MiB at the peak (a tensor is briefly in memory
  // twice); as a DOM it was about 250.
  EXPECT_LT(peak, 140) << "peak resident memory " << peak << " MiB";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attncheck
