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

# CLI behaviour, and the published-runs table of docs/PLANNER.md recomputed.
# (tests/test_plan_reality.py measures wall-clock time on this machine: run by
# hand, never registered.)
foreach(t cli validation)
  add_test(NAME plan_${t} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_${t}.py)
  set_tests_properties(plan_${t} PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};PLANNER_DOC=${PROJECT_SOURCE_DIR}/docs/PLANNER.md")
endforeach()

bs_tier(unit TESTS plan_formulas plan_moe plan_kernels_measured plan_dense_blocks plan_cli plan_validation)
