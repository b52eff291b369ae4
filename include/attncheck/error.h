#pragma once
// The one exception type for bad user input: the CLI turns it into exit
// code 2 and one line.

#include <stdexcept>
#include <string>

namespace attncheck {

/// Bad input: a malformed file, a wrong shape, an unknown name. The message
/// names the file, field or argument.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attncheck
