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

# Issue 32's hostile plugins (tests/host/plugins/escapes.c): a worker
# stopped between calls, daemons, posix_spawn, a daemon from a
# constructor, forged and oversized replies, printed output, a closed
# channel, memory eaten: each bounded, killed, reported.
attncheck_test_plugin(plugin_escapes ${CMAKE_CURRENT_LIST_DIR}/plugins/escapes.c)
attncheck_test_plugin(plugin_escapes_ctor ${CMAKE_CURRENT_LIST_DIR}/plugins/escapes.c
  ESCAPES_IN_CONSTRUCTOR)
attncheck_test_plugin(plugin_escapes_many ${CMAKE_CURRENT_LIST_DIR}/plugins/many.c)
foreach(p plugin_escapes plugin_escapes_ctor plugin_escapes_many)
  target_link_libraries(${p} PRIVATE m)
  set_target_properties(${p} PROPERTIES C_EXTENSIONS ON)
endforeach()
if(ATTNCHECK_SANITIZE)
  set(attncheck_sanitized 1)
else()
  set(attncheck_sanitized 0)
endif()
add_test(NAME isolation.reliability COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/reliability_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_escapes> $<TARGET_FILE:plugin_escapes_ctor>
  $<TARGET_FILE:plugin_escapes_many> ${attncheck_sanitized})
set_tests_properties(isolation.reliability PROPERTIES LABELS slow TIMEOUT 900)

# The refusal rule (docs/properties.md): plugins that declare bottom-right
# alignment or causal masks and refuse them fail, the feature named; one
# that refuses everything is unsupported.
attncheck_test_plugin(plugin_refusing ${CMAKE_CURRENT_LIST_DIR}/plugins/refusing.c)
target_link_libraries(plugin_refusing PRIVATE m)
add_test(NAME isolation.refused_features COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/refused_features_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_refusing>)
set_tests_properties(isolation.refused_features PROPERTIES LABELS fast)

# After a hang the other properties keep their verdicts and undeclared ones
# stay skipped (docs/isolation.md): a plugin hanging on tk = 3 only.
add_test(NAME isolation.hang_keeps_verdicts COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hang_budget_test.sh
  $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_hostile>)
set_tests_properties(isolation.hang_keeps_verdicts PROPERTIES LABELS fast)

# Built-in modules (attncheck_torch.so, attncheck_ggml.so) load on demand:
# only a command that needs one of their implementations starts it.
add_test(NAME host.modules_on_demand COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/modules_on_demand_test.sh
  $<TARGET_FILE:attncheck>)
set_tests_properties(host.modules_on_demand PROPERTIES LABELS fast)

# Issue 50's containment (tests/host/plugins/contain.c): daemons that
# clear or scrub their environment, a harness killed mid-call, signals sent
# to the harness, privileges, memory in every kind of mapping, the wire's
# misuses; each in a PID namespace and in the fallback without one.
attncheck_test_plugin(plugin_contain ${CMAKE_CURRENT_LIST_DIR}/plugins/contain.c)
attncheck_test_plugin(plugin_contain_ctor ${CMAKE_CURRENT_LIST_DIR}/plugins/contain.c
  CONTAIN_CTOR_WRITES)
foreach(p plugin_contain plugin_contain_ctor)
  target_link_libraries(${p} PRIVATE m)
  set_target_properties(${p} PROPERTIES C_EXTENSIONS ON)
endforeach()
foreach(mode namespace fallback)
  add_test(NAME isolation.containment.${mode} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/containment_test.sh
    $<TARGET_FILE:attncheck> $<TARGET_FILE:plugin_contain> $<TARGET_FILE:plugin_contain_ctor> ${mode}
    ${attncheck_sanitized})
  set_tests_properties(isolation.containment.${mode} PROPERTIES LABELS fast TIMEOUT 120)
endforeach()
