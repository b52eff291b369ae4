#pragma once
// describe's text: every field an implementation declares, a line each,
// foreign text made printable (what a plugin author reads to see how the
// descriptor was understood), the stages a precision declares and a line
// per dispatch path. `attncheck describe` and `list --verbose` print it;
// its JSON form is implementation_json (formats/report.h).

#include <string>

#include "attncheck/implementation.h"

namespace attncheck {

/// The declaration of `i` as describe prints it, ending in a newline.
std::string declaration_text(const ImplInfo& i);

}  // namespace attncheck
