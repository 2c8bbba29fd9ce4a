# device_pp.cmake: pipeline parallelism on device buffers (`train --device sim --pp 2` under mpirun, the host path)
# against one CPU process, its checkpoint on CPU layouts, a missing wait sim shows, and its refusals.
add_test(NAME device_pp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_pp.py)
set_tests_properties(device_pp_sim PROPERTIES LABELS device TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
bs_tier(layouts TESTS device_pp_sim)
