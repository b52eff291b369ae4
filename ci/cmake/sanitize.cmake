# Sanitizer and fuzzing builds: no input may crash the tool or corrupt
# memory. Included by the
# top-level CMakeLists.txt before any target is made, so the options below
# reach every target of the project: the libraries, the built-in
# implementations, the tests and the test plugins.
#
#   ATTNCHECK_SANITIZE=ON  AddressSanitizer + UndefinedBehaviorSanitizer on
#                          everything, any error fatal. clang or gcc.
#   ATTNCHECK_FUZZ=ON      the libFuzzer targets of tests/fuzz/ (clang only);
#                          the file readers and the command line get coverage
#                          instrumentation (tests/fuzz/fuzz.cmake).
#
# ci/test configures both in one folder, build-asan, with clang and
# -DATTNCHECK_WITH_TORCH=OFF: LibTorch is an uninstrumented upstream binary
# (its own allocator, OpenMP threads, and no way to rebuild it with the
# sanitizers here), so it would add false positives or nothing. Uninstrumented
# libraries are otherwise fine (fmt, MPFR, GoogleTest, RapidCheck): ASan
# intercepts malloc for all of them, it only cannot see their own accesses.
option(ATTNCHECK_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(ATTNCHECK_FUZZ "Build the libFuzzer targets of tests/fuzz/ (clang only)" OFF)

if(ATTNCHECK_SANITIZE)
  # -fno-sanitize-recover=all: a UBSan finding aborts the test like an ASan
  # one, instead of a line in a log nobody reads. float-divide-by-zero is
  # not in "undefined" (IEEE division by zero is how the numeric code makes
  # infinities on purpose).
  set(ATTNCHECK_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
      -fno-sanitize-recover=all)
  add_compile_options(${ATTNCHECK_SANITIZE_FLAGS})
  add_link_options(-fsanitize=address,undefined)
  # libstdc++'s own checks (operator[] in bounds, front() of an empty
  # vector, ...): they catch what stays inside an allocation, where ASan
  # cannot see. No ABI change.
  add_compile_definitions(_GLIBCXX_ASSERTIONS)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # Line tables are all a symbolized stack trace needs, and are much
    # cheaper to compile than full -g.
    add_compile_options(-gline-tables-only)
  endif()
  message(STATUS "attncheck: building with ASan and UBSan (${CMAKE_CXX_COMPILER_ID})")
endif()

if(ATTNCHECK_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ATTNCHECK_FUZZ needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(NOT ATTNCHECK_SANITIZE)
    message(WARNING "ATTNCHECK_FUZZ without ATTNCHECK_SANITIZE finds crashes only; "
                    "add -DATTNCHECK_SANITIZE=ON to find memory errors too")
  endif()
  if(NOT ATTNCHECK_BUILD_TESTS)
    message(FATAL_ERROR "ATTNCHECK_FUZZ needs ATTNCHECK_BUILD_TESTS (the fuzz targets live in tests/fuzz/)")
  endif()
  message(STATUS "attncheck: building the libFuzzer targets of tests/fuzz/")
endif()
