# plan.cmake: tests of the planner (src/plan, `batchscale plan`,
# `batchscale bench --calibrate`).
#

add_executable(test_plan_formulas ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_formulas.c)
target_link_libraries(test_plan_formulas PRIVATE bscore)
add_test(NAME plan_formulas COMMAND test_plan_formulas)
add_executable(test_plan_moe ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_moe.c)
target_link_libraries(test_plan_moe PRIVATE bscore)
add_test(NAME plan_moe COMMAND test_plan_moe)
add_executable(test_plan_kernels_measured ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_kernels_measured.c)
target_link_libraries(test_plan_kernels_measured PRIVATE bscore)
add_test(NAME plan_kernels_measured COMMAND test_plan_kernels_measured ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_cublas_gemm.tsv
         ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_sdpa_attention.tsv)
add_executable(test_plan_dense_blocks ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_dense_blocks.c)
target_link_libraries(test_plan_dense_blocks PRIVATE bscore)
add_test(NAME plan_dense_blocks COMMAND test_plan_dense_blocks ${CMAKE_CURRENT_SOURCE_DIR}/data/h200_dense_blocks.tsv)

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
