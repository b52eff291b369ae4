# ---- Precision by stage and by path through the C ABI (SPEC 4.1, 5.1) ----
# Included from tests/CMakeLists.txt after the plugin section, whose
# attncheck_test_plugin and ATTNCHECK_TEST_PLUGIN_DIR it uses.

# The example built against the version 2 header as it was before the
# stages and paths were appended (a frozen copy, found before include/):
# it must load and mean what it meant.
attncheck_test_plugin(example_plugin_first_v2 ${PROJECT_SOURCE_DIR}/examples/plugin/attention.c)
target_include_directories(example_plugin_first_v2 BEFORE PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/plugins/first_v2_header)
target_link_libraries(example_plugin_first_v2 PRIVATE m)

# Stages, two paths and last_path; the same in a later header's larger structs.
attncheck_test_plugin(plugin_staged_paths ${CMAKE_CURRENT_LIST_DIR}/plugins/staged_paths.c)
target_link_libraries(plugin_staged_paths PRIVATE m)
attncheck_test_plugin(plugin_staged_paths_newer ${CMAKE_CURRENT_LIST_DIR}/plugins/staged_paths.c
  NEWER_LAYOUT)
target_link_libraries(plugin_staged_paths_newer PRIVATE m)

# One build of plugins/bad_stages.c per defect (and two valid ones).
set(ATTNCHECK_STAGE_BUILDS valid last_path_no_paths
  bad_stage_bits bad_stage_format bad_e5m2_accum bad_e4m3_accum q8_0_q_cast
  bad_q4_0_q_cast bad_q8_0_accum bad_q8_0_p_cast bad_q4_0_s_cast bad_block_dtype_bit
  bad_block_q_dtype bad_block_out bad_q_cast_format bad_ftz bad_n_paths bad_null_paths bad_path_size
  bad_path_stride bad_path_null_name bad_path_long_name bad_path_name bad_path_repeated
  bad_path_accum bad_path_stage bad_path_ftz bad_tighter)
set(stage_plugins)
foreach(build ${ATTNCHECK_STAGE_BUILDS})
  string(TOUPPER ${build} define)
  attncheck_test_plugin(plugin_stages_${build} ${CMAKE_CURRENT_LIST_DIR}/plugins/bad_stages.c
    ${define})
  list(APPEND stage_plugins plugin_stages_${build})
endforeach()

attncheck_test(test_plugin_paths host/test_plugin_paths.cpp attncheck::run attncheck::impls)
target_compile_definitions(test_plugin_paths PRIVATE
  ATTNCHECK_TEST_PLUGIN_DIR="${ATTNCHECK_TEST_PLUGIN_DIR}")
target_link_libraries(test_plugin_paths PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(test_plugin_paths attncheck_example_plugin example_plugin_first_v2
  plugin_staged_paths plugin_staged_paths_newer)

# Every refusal through `attncheck list --plugin`: exit 2, one line.
add_test(NAME host.descriptor_refusals
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/descriptor_refusals_test.sh $<TARGET_FILE:attncheck>
          ${ATTNCHECK_TEST_PLUGIN_DIR})
set_tests_properties(host.descriptor_refusals PROPERTIES LABELS fast)
# ctest runs tests, not builds: the plugins come with the test program's build.
add_dependencies(test_plugin_paths ${stage_plugins})
