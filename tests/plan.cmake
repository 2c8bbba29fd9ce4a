# plan.cmake: tests of the planner (src/plan, `batchscale plan`,
# `batchscale bench --calibrate`).
#

add_executable(test_plan_formulas ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_formulas.c)
target_link_libraries(test_plan_formulas PRIVATE bs_plan)
add_test(NAME plan_formulas COMMAND test_plan_formulas)
add_executable(test_plan_moe ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_moe.c)
target_link_libraries(test_plan_moe PRIVATE bs_plan)
add_test(NAME plan_moe COMMAND test_plan_moe)
add_executable(test_plan_kernels_measured ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_kernels_measured.c)
target_link_libraries(test_plan_kernels_measured PRIVATE bs_plan)
add_test(NAME plan_kernels_measured COMMAND test_plan_kernels_measured ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_cublas_gemm.tsv
         ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_sdpa_attention.tsv)
add_executable(test_plan_dense_blocks ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_dense_blocks.c)
target_link_libraries(test_plan_dense_blocks PRIVATE bs_plan)
add_test(NAME plan_dense_blocks COMMAND test_plan_dense_blocks ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_dense_blocks.tsv)
add_executable(test_plan_answer ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_answer.c)
target_link_libraries(test_plan_answer PRIVATE bs_plan)
add_test(NAME plan_answer COMMAND test_plan_answer)
# The planner's programs link src/plan alone: neither what CMake links them
# with (every target reached through target_link_libraries) nor what the
# programs load may be MPI, oneDNN, BLAS or cairo.
function(bs_link_closure target out)
  set(seen "")
  set(found "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    list(APPEND found ${t})
    if(TARGET ${t})
      foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
        get_target_property(libs ${t} ${property})
        if(libs)
          list(APPEND todo ${libs})
        endif()
      endforeach()
    endif()
  endwhile()
  string(REPLACE ";" "," found "${found}")
  set(${out} "${found}" PARENT_SCOPE)
endfunction()
bs_link_closure(test_plan_answer PLAN_LINKS)
add_test(NAME plan_links_alone COMMAND ${CMAKE_COMMAND} "-DLINKS=${PLAN_LINKS}"
         -DPROGRAMS=$<TARGET_FILE:test_plan_formulas>,$<TARGET_FILE:test_plan_moe>,$<TARGET_FILE:test_plan_answer>
         -P ${CMAKE_CURRENT_SOURCE_DIR}/plan_links_alone.cmake)

# CLI behaviour, the published-runs table of docs/reference/planner-validation.md recomputed, and
# the stack presets (docs/reference/stacks.md) with that table run through them.
# (tests/test_plan_reality.py measures wall-clock time on this machine: run by
# hand, never registered.)
foreach(t cli validation stacks)
  add_test(NAME plan_${t} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_${t}.py)
  set_tests_properties(plan_${t} PROPERTIES ENVIRONMENT
                      "BATCHSCALE=${BS};PLANNER_DOC=${PROJECT_SOURCE_DIR}/docs/reference/planner-validation.md")
endforeach()
# The docs' generated tables equal what scripts/gen-doc-tables.py makes from their data (tests/data/*.tsv).
add_test(NAME doc_tables COMMAND ${PY} ${PROJECT_SOURCE_DIR}/scripts/gen-doc-tables.py --check)
set_tests_properties(doc_tables PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}")
# The Python package (python/): built by pip in a fresh virtual environment, its answers against the CLI's
# --json; skips (77) with its reason where venv or pip cannot be had.
add_test(NAME plan_python COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_python.py)
set_tests_properties(plan_python PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77 TIMEOUT 1500)

bs_tier(unit TESTS plan_formulas plan_moe plan_kernels_measured plan_dense_blocks plan_answer plan_links_alone plan_cli
        plan_validation doc_tables)
# plan_stacks runs the whole validation table three times (presets, pinned, bare): a minute here.
bs_tier(slow TESTS plan_stacks plan_python)
