# The text `value` as the inside of a C string literal in `out`: a path
# holding a quote or a backslash must not end the literal or escape it.
function(attncheck_c_string out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  string(REPLACE "\n" "\\n" value "${value}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()
