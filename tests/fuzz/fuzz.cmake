# Fuzz targets of the file readers and the command line (tests/fuzz/,
# fuzz_target.h). Included at the end of tests/CMakeLists.txt.
#
# Every build: fuzz_corpus, all targets in one plain executable, and the
# ctests fuzz_corpus.NAME running each file of tests/fuzz/corpus/NAME/ once
# (the seeds, and the reproducers of every bug fuzzing found).
# ATTNCHECK_FUZZ=ON (clang; ci/cmake/sanitize.cmake): one libFuzzer
# executable fuzz_NAME per target; tests/fuzz/run-fuzzers runs them.

set(ATTNCHECK_FUZZ_TARGETS fixture report expected_failures cli_args)
set(ATTNCHECK_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(attncheck_fuzz_common STATIC ${ATTNCHECK_FUZZ_DIR}/fuzz_target.cpp)
target_include_directories(attncheck_fuzz_common PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(attncheck_fuzz_common PUBLIC attncheck_cli attncheck::run)
attncheck_warnings(attncheck_fuzz_common)

set(sources)
foreach(name ${ATTNCHECK_FUZZ_TARGETS})
  list(APPEND sources ${ATTNCHECK_FUZZ_DIR}/fuzz_${name}.cpp)
endforeach()
add_executable(fuzz_corpus ${ATTNCHECK_FUZZ_DIR}/corpus_main.cpp ${sources})
target_link_libraries(fuzz_corpus PRIVATE attncheck_fuzz_common attncheck::impls attncheck::broken_impls)
attncheck_warnings(fuzz_corpus)

foreach(name ${ATTNCHECK_FUZZ_TARGETS})
  add_test(NAME fuzz_corpus.${name}
    COMMAND fuzz_corpus ${name} ${ATTNCHECK_FUZZ_DIR}/corpus/${name})
  set_tests_properties(fuzz_corpus.${name} PROPERTIES LABELS fast)
endforeach()

if(ATTNCHECK_FUZZ)
  # Coverage feedback where the inputs are parsed: the readers
  # (formats/: fixtures, reports, expected failures) and the command line
  # (CLI11 is compiled into commands.cpp).
  # Only there: the rest of the ctest suite would only run slower.
  set_property(TARGET attncheck_formats attncheck_cli APPEND PROPERTY
    COMPILE_OPTIONS -fsanitize=fuzzer-no-link)
  foreach(name ${ATTNCHECK_FUZZ_TARGETS})
    add_executable(fuzz_${name} ${ATTNCHECK_FUZZ_DIR}/fuzz_${name}.cpp
      ${ATTNCHECK_FUZZ_DIR}/libfuzzer_main.cpp)
    target_compile_definitions(fuzz_${name} PRIVATE
      ATTNCHECK_FUZZ_TARGET_NAME="${name}")
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${name} PRIVATE attncheck_fuzz_common attncheck::impls attncheck::broken_impls)
    attncheck_warnings(fuzz_${name})
  endforeach()
endif()
