# ---- The Python module (integrations/python/), when it is built ----
# Included from tests/CMakeLists.txt. Both run pytest with the build's
# package (build/python) and the interpreter it was built for, without
# network, writing nothing into the source tree (no bytecode, no cache,
# fixtures under the build directory).
set(ATTNCHECK_PYTEST_ENV "PYTHONPATH=${PROJECT_BINARY_DIR}/python" "PYTHONDONTWRITEBYTECODE=1"
  "ATTNCHECK=$<TARGET_FILE:attncheck>")
# The bridge: crash, hang, raise, fork, wrong shape and dtype in a Python
# implementation are failures with their fixtures; the plugin; --python.
add_test(NAME python.bridge
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}
  WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
# The examples (docs/python.md), as a user runs them from the top of
# the tree.
add_test(NAME python.examples
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider examples/python
          --attncheck-save-failures ${PROJECT_BINARY_DIR}/python-example-failures
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python.bridge python.examples PROPERTIES LABELS slow TIMEOUT 1200
  ENVIRONMENT "${ATTNCHECK_PYTEST_ENV}")
# NumPy's exp in ulps (docs/plugins-and-packaging.md "Choosing exp_ulps"):
# within 2 in float64 and 3 in float32, the declarations the docs advise.
add_test(NAME numerics.exp_ulps_numpy
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/numerics/exp_ulps.py --check 2 3)
set_tests_properties(numerics.exp_ulps_numpy PROPERTIES LABELS fast)
