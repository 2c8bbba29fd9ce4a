# device_comm.cmake: collectives on device buffers (comm/device_comm.h)
# against the CPU collectives: the host path on sim under mpirun (2-4 ranks),
# and on a CUDA GPU (label gpu, one rank: nccl and host), which skips (exit
# 77, with the reason) where none answers and fails under BS_REQUIRE_GPU=1.
set(DEVICE_COMM_MPIRUN mpirun --allow-run-as-root --oversubscribe --bind-to none)
add_executable(test_device_comm test_device_comm.c)
target_link_libraries(test_device_comm PRIVATE bscore)
foreach(n 1 2 3 4)
  add_test(NAME device_comm_sim_np${n} COMMAND ${DEVICE_COMM_MPIRUN} -np ${n} $<TARGET_FILE:test_device_comm> sim)
  set_tests_properties(device_comm_sim_np${n} PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
  list(APPEND DEVICE_COMM_SIM_TESTS device_comm_sim_np${n})
endforeach()
# Two emulated nodes of two ranks: the hierarchical algorithm's node and cross passes.
add_test(NAME device_comm_sim_np4_nodes_of_2 COMMAND ${DEVICE_COMM_MPIRUN} -np 4 $<TARGET_FILE:test_device_comm> sim host 2)
set_tests_properties(device_comm_sim_np4_nodes_of_2 PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
list(APPEND DEVICE_COMM_SIM_TESTS device_comm_sim_np4_nodes_of_2)
# A rank that never joins: the device all-reduce ends the job within --comm-timeout, naming it.
add_test(NAME device_comm_sim_timeout COMMAND ${DEVICE_COMM_MPIRUN} -np 2 $<TARGET_FILE:test_device_comm> sim host stall)
set_tests_properties(device_comm_sim_timeout PROPERTIES LABELS device TIMEOUT 25 ENVIRONMENT OMP_NUM_THREADS=1
  PASS_REGULAR_EXPRESSION "\\[rank 0\\] error: all-reduce \\(ring, [0-9.]+ MB\\) on the world group timed out after 1 s waiting for rank 1 on host"
  FAIL_REGULAR_EXPRESSION "FAIL")
list(APPEND DEVICE_COMM_SIM_TESTS device_comm_sim_timeout)
add_test(NAME device_comm_nccl_gpu COMMAND test_device_comm cuda nccl)
add_test(NAME device_comm_host_gpu COMMAND test_device_comm cuda host)
set_tests_properties(device_comm_nccl_gpu device_comm_host_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT OMP_NUM_THREADS=1)

bs_tier(layouts TESTS ${DEVICE_COMM_SIM_TESTS})
bs_tier(slow TESTS device_comm_nccl_gpu device_comm_host_gpu)
