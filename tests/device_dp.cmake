# device_dp.cmake: data parallelism on device buffers (`train --device sim` under mpirun, the host path) against
# one CPU process, its checkpoint on one process, and its refusals.
add_test(NAME device_dp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_dp.py)
set_tests_properties(device_dp_sim PROPERTIES LABELS device TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
bs_tier(layouts TESTS device_dp_sim)
