# device_pp.cmake: pipeline parallelism on device buffers (`train --device sim|cuda --pp` under mpirun, the host path)
# against one CPU process, its checkpoint on CPU layouts, a missing wait sim shows, and its refusals.
add_test(NAME device_pp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_pp.py sim)
add_test(NAME device_pp_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_pp.py cuda)
set_tests_properties(device_pp_sim PROPERTIES LABELS device TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
set_tests_properties(device_pp_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP} TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
bs_tier(layouts TESTS device_pp_sim)
bs_tier(slow TESTS device_pp_gpu)
