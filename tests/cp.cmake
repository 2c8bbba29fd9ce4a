# cp.cmake: context parallelism: the attention kernels against the
# single-process attention, and (test_cp.py) training layouts with --cp
# against one process.
add_executable(test_cp_attention test_cp_attention.c)
target_link_libraries(test_cp_attention PRIVATE bscore)
foreach(n 2 4)
  add_test(NAME cp_attention_np${n}
           COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -np ${n} $<TARGET_FILE:test_cp_attention>)
  set_tests_properties(cp_attention_np${n} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
add_test(NAME cp_equivalence COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_cp.py)
set_tests_properties(cp_equivalence PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 1200)

bs_tier(layouts TESTS cp_attention_np2 cp_attention_np4 cp_equivalence)
