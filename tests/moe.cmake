# moe.cmake: the Mixture-of-Experts layer (src/model/moe.h) against a PyTorch
# reference written from the formulas, its finite-difference gradient check
# in double, and expert parallelism against one process (prefix moe_).
add_executable(test_moe_layer test_moe_layer.c)
target_link_libraries(test_moe_layer PRIVATE bscore)
add_test(NAME moe_layer COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe.py $<TARGET_FILE:test_moe_layer>)
add_test(NAME moe_config_check COMMAND $<TARGET_FILE:test_moe_layer> check)
set_tests_properties(moe_layer PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")

# The layer in double precision (real.h) for the finite-difference check: moe.c with the kernels it calls.
add_executable(test_moe_gradcheck test_moe_gradcheck.c ${PROJECT_SOURCE_DIR}/src/model/moe.c ${PROJECT_SOURCE_DIR}/src/model/moe_config.c
               ${PROJECT_SOURCE_DIR}/src/kernels/matmul.c ${PROJECT_SOURCE_DIR}/src/kernels/gelu.c
               ${PROJECT_SOURCE_DIR}/src/core/error.c ${PROJECT_SOURCE_DIR}/src/core/reason.c)
target_compile_definitions(test_moe_gradcheck PRIVATE BS_REAL_DOUBLE)
target_include_directories(test_moe_gradcheck PRIVATE ${PROJECT_SOURCE_DIR}/src ${CBLAS_INCLUDE})
target_link_libraries(test_moe_gradcheck PRIVATE ${OPENBLAS_LIB} OpenMP::OpenMP_C m)
add_test(NAME moe_gradcheck COMMAND $<TARGET_FILE:test_moe_gradcheck>)
set_tests_properties(moe_gradcheck PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")

# Expert parallelism: every rank's rows and gradients against one process over all ranks' rows.
add_executable(test_moe_parallel test_moe_parallel.c)
target_link_libraries(test_moe_parallel PRIVATE bscore)
foreach(n 2 4)
  add_test(NAME moe_parallel_np${n}
           COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -np ${n} $<TARGET_FILE:test_moe_parallel>)
  set_tests_properties(moe_parallel_np${n} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# The MoE GPT: against PyTorch (moe_gpt_dump), and through the trainer: layouts, balance, checkpoints, bad input.
add_executable(moe_gpt_dump moe_gpt_dump.c)
target_link_libraries(moe_gpt_dump PRIVATE bscore)
add_test(NAME moe_model COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_model.py $<TARGET_FILE:moe_gpt_dump>)
set_tests_properties(moe_model PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# Expert parallelism in the trainer: ep 2, ep 2 x dp 2 and ep 4 against 1 process, checkpoints resharded between ep sizes.
add_test(NAME moe_ep COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_ep.py)
set_tests_properties(moe_ep PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# Expert parallelism with ZeRO 1 and 2 (ep 2, ep 2 x dp 2, and with tp, pp or cp 2) against 1 process; ZeRO checkpoints resumed and resharded.
add_test(NAME moe_ep_zero COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_ep_zero.py)
set_tests_properties(moe_ep_zero PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# A capacity factor with gradient accumulation: 2 ranks against 1 process up to the first step routed apart, and the rule layout-independent from one checkpoint.
add_test(NAME moe_accum COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_accum.py)
set_tests_properties(moe_accum PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# --moe-every and pipeline parallelism: pp 2, pp 2 x ep 2, interleaved stages against 1 process, checkpoints to 1 process.
add_test(NAME moe_pipeline COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_pipeline.py)
set_tests_properties(moe_pipeline PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# Tensor and context parallelism over MoE layers (alone and with EP) against 1 process; tp x ep resharded.
add_test(NAME moe_tp COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_tp.py)
set_tests_properties(moe_tp PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)

# The router's gates (--moe-gates, --moe-routed-scale): a top-1 router learns from the language-model loss alone, the gates in checkpoints, bad input.
add_test(NAME moe_router COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_router.py)
set_tests_properties(moe_router PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1" TIMEOUT 300)
# Nothing dropped: an MoE checkpoint to safetensors (every expert, router and bias; logits against PyTorch) and back bitwise, sparse upcycling, one-line refusals.
add_test(NAME moe_export COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_export.py $<TARGET_FILE:moe_gpt_dump>)
set_tests_properties(moe_export PROPERTIES ENVIRONMENT
  "BATCHSCALE=${BS};OMP_NUM_THREADS=1;BS_HF_PYTHON=${BS_HF_VENV}/bin/python" TIMEOUT 300)

bs_tier(unit TESTS moe_config_check moe_gradcheck)
bs_tier(peers TESTS moe_layer moe_model moe_export)
bs_tier(layouts TESTS moe_parallel_np2 moe_parallel_np4 moe_ep moe_ep_zero moe_accum moe_pipeline moe_tp)
bs_tier(slow TESTS moe_router)
bs_uses_kjv(TESTS moe_model)
