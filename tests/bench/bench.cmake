# attncheck bench (bench/): the smoke preset through the command
# line, its JSON report and SVG checked by test_bench_report, and exit 2 on
# bad input. Fast: a few seconds; nothing is timed.
add_executable(test_bench_report ${CMAKE_CURRENT_LIST_DIR}/test_bench_report.cpp)
target_link_libraries(test_bench_report PRIVATE nlohmann_json::nlohmann_json)
attncheck_warnings(test_bench_report)
add_test(NAME bench.smoke COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:test_bench_report>)
set_tests_properties(bench.smoke PROPERTIES LABELS fast TIMEOUT 120)

# The readings and growth fitting on made-up points: no child process.
attncheck_test(test_reading bench/test_reading.cpp attncheck::bench)
