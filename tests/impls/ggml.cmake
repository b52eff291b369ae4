# The ggml adapters (impls/ggml/): included by tests/CMakeLists.txt when
# they are built.
#
# test_ggml: the adapters' view of ggml's dispatch against what ggml
# computes, and each finding of docs/ggml.md recomputed.
attncheck_test(test_ggml impls/test_ggml.cpp attncheck::run attncheck::all_impls
  attncheck_ggml_impls)

# Every adapter through the CI profile at the default seed, from the
# source folder so that fixtures/expected-failures.json is read: each
# passes, or fails only where a recorded expected failure says so (an
# unexpected failure or an expected one that passes exits 1).
set(ATTNCHECK_GGML_ADAPTERS)
foreach(format f16 bf16 f32)
  list(APPEND ATTNCHECK_GGML_ADAPTERS ggml_fa_${format} ggml_fa_${format}_mt ggml_fa_${format}_ref
    ggml_softmax_${format} ggml_softmax_${format}_mt)
endforeach()
# Block-quantized K/V: one thread each (ggml_adapters.cpp: more threads or
# use_ref compute the same for these formats).
foreach(format q8_0 q4_0)
  list(APPEND ATTNCHECK_GGML_ADAPTERS ggml_fa_${format} ggml_softmax_${format})
endforeach()
foreach(adapter IN LISTS ATTNCHECK_GGML_ADAPTERS)
  add_test(NAME ggml.check.${adapter}
    COMMAND attncheck check --impl ${adapter}
      --save-failures ${CMAKE_CURRENT_BINARY_DIR}/ggml-failures
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(ggml.check.${adapter} PROPERTIES LABELS fast TIMEOUT 600)
endforeach()

# Each finding's fixture (fixtures/ggml/) still fails on today's ggml:
# replay exits 1 naming the property.
file(GLOB ATTNCHECK_GGML_FINDINGS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/fixtures/ggml/*.json)
foreach(fixture ${ATTNCHECK_GGML_FINDINGS})
  get_filename_component(stem ${fixture} NAME_WE)
  add_test(NAME ggml.finding.${stem}
    COMMAND bash -c "out=$(\"$0\" replay \"$1\" 2>&1); rc=$?; echo \"$out\"; test $rc -eq 1 && echo \"$out\" | grep -q '^failed'"
      $<TARGET_FILE:attncheck> ${fixture}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(ggml.finding.${stem} PROPERTIES LABELS fast)
endforeach()

# attncheck's own gap G1 (docs/ggml.md), closed: the case ggml answers
# exactly as declared passes on both q4_0 graphs.
foreach(adapter ggml_fa_q4_0 ggml_softmax_q4_0)
  add_test(NAME ggml.gap_closed.${adapter}
    COMMAND attncheck replay
      ${PROJECT_SOURCE_DIR}/fixtures/ggml/attncheck-gap/q8_0-logit-error-past-linearisation.json
      --impl ${adapter})
  set_tests_properties(ggml.gap_closed.${adapter} PROPERTIES LABELS fast)
endforeach()
