# Measurements a declaration rests on, kept as tests so that the numbers the
# docs quote stay true (docs/plugins-and-packaging.md "Choosing exp_ulps"):
# the C library's exp and expf within 1 ulp (the built-ins' exp_ulps 1).
add_executable(exp_ulps ${CMAKE_CURRENT_LIST_DIR}/exp_ulps.cpp)
attncheck_warnings(exp_ulps)
add_test(NAME numerics.exp_ulps_libm COMMAND exp_ulps --check 1 1)
set_tests_properties(numerics.exp_ulps_libm PROPERTIES LABELS fast)
