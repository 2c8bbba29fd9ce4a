# Collectives: every algorithm against the exact answer and MPI's own, for
# 1..8 ranks (oversubscribed) and emulated multi-node layouts.
set(MPIRUN_FLAGS --allow-run-as-root --oversubscribe --bind-to none)
add_executable(test_collectives test_collectives.c)
target_link_libraries(test_collectives PRIVATE bscore)
foreach(n 1 2 3 4 5 6 7 8)
  add_test(NAME comm_collectives_np${n} COMMAND mpirun ${MPIRUN_FLAGS} -np ${n} $<TARGET_FILE:test_collectives>)
  list(APPEND COMM_TESTS comm_collectives_np${n})
endforeach()
foreach(layout "4;2" "6;2" "6;3" "8;2" "8;4")
  list(GET layout 0 n)
  list(GET layout 1 k)
  add_test(NAME comm_collectives_np${n}_nodes_of_${k}
           COMMAND mpirun ${MPIRUN_FLAGS} -np ${n} $<TARGET_FILE:test_collectives> ${k})
  list(APPEND COMM_TESTS comm_collectives_np${n}_nodes_of_${k})
endforeach()

bs_tier(layouts TESTS ${COMM_TESTS})
