# ---- Isolation (host/isolation.h): crashes, hangs, scribbles ----
# Included from tests/CMakeLists.txt after the plugin section, whose
# attncheck_test_plugin and ATTNCHECK_TEST_PLUGIN_DIR it uses.
attncheck_test_plugin(plugin_hostile ${CMAKE_CURRENT_LIST_DIR}/plugins/hostile.c)
target_link_libraries(plugin_hostile PRIVATE m)

attncheck_test(test_isolation host/test_isolation.cpp attncheck::run attncheck::impls attncheck::broken_impls fmt::fmt)
target_compile_definitions(test_isolation PRIVATE
  ATTNCHECK_HOSTILE_PLUGIN="$<TARGET_FILE:plugin_hostile>")
target_include_directories(test_isolation PRIVATE ${PROJECT_SOURCE_DIR})
add_dependencies(test_isolation plugin_hostile)

# The command line with the hostile plugin beside a built-in: each hostile
# implementation fails with a fixture, the built-in is still checked.
add_test(NAME isolation.cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/isolation_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_hostile>)
set_tests_properties(isolation.cli PROPERTIES LABELS slow)

# A plugin that forks in forward, and plugins that exit, crash or hang
# while loading (tests/host/isolation_load_test.sh).
attncheck_test_plugin(plugin_forker ${CMAKE_CURRENT_LIST_DIR}/plugins/forker.c)
target_link_libraries(plugin_forker PRIVATE m)
foreach(mode EXIT_IN_CONSTRUCTOR EXIT_IN_IMPLS CRASH HANG)
  string(TOLOWER ${mode} lower)
  attncheck_test_plugin(plugin_load_${lower} ${CMAKE_CURRENT_LIST_DIR}/plugins/bad_load.c
    LOAD_${mode})
endforeach()
add_test(NAME isolation.hostile_load COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/isolation_load_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_forker> $<TARGET_FILE_DIR:plugin_forker>)
set_tests_properties(isolation.hostile_load PROPERTIES LABELS slow TIMEOUT 600)

# Plugin text that is not clean UTF-8 (a Latin-1 byte in an error message
# and in the plugin's file name, C1 and bidi controls): the reports are
# still written, valid UTF-8, the text escaped.
attncheck_test_plugin(plugin_latin1 ${CMAKE_CURRENT_LIST_DIR}/plugins/latin1.c)
add_test(NAME isolation.non_utf8_text COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/utf8_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_latin1>)
set_tests_properties(isolation.non_utf8_text PROPERTIES LABELS fast)
