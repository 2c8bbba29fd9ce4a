# recompute.cmake: activation recomputation (--recompute selective|full) bit for bit against none (prefix
# recompute_): one process (fp32, bf16, masked documents, fp8, MoE) and the refused combinations in the unit tier;
# --pp 2 (zbh1 too), --tp 2, --cp 2 and MoE over --dp 2 / --ep 2 on 2 processes in the layouts tier; on a CUDA GPU
# in the slow tier.
foreach(part one flags layouts)
  add_test(NAME recompute_${part} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_recompute.py ${part})
  set_tests_properties(recompute_${part} PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77)
endforeach()
bs_tier(unit TESTS recompute_one recompute_flags)
# The device step on a CUDA GPU (skipped, with the reason, where none runs).
add_test(NAME recompute_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_recompute.py gpu)
set_tests_properties(recompute_gpu PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77 LABELS "device;gpu")
bs_tier(slow TESTS recompute_gpu)
bs_tier(layouts TESTS recompute_layouts)
# The engine's saving against the planner's activation formula for the same mode (exact up to named terms).
add_executable(test_recompute_memory test_recompute_memory.c recompute_memory_engine.c)
target_link_libraries(test_recompute_memory PRIVATE bscore)
add_test(NAME recompute_memory COMMAND $<TARGET_FILE:test_recompute_memory>)
bs_tier(unit TESTS recompute_memory)
