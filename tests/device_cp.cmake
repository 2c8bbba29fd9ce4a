# device_cp.cmake: context parallelism on device buffers (model/gpt_device_cp.h): `train --device sim --cp 2|4
# (ring and allgather; and x tp 2) against one CPU process, its checkpoint on one process, bf16's refusal.
add_test(NAME device_cp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_cp.py)
set_tests_properties(device_cp_sim PROPERTIES LABELS device TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
# The same on a GPU (the ranks sharing it through the host path): skipped with the reason where none answers.
add_test(NAME device_cp_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_cp.py cuda)
set_tests_properties(device_cp_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP} TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
bs_tier(layouts TESTS device_cp_sim)
bs_tier(slow TESTS device_cp_gpu)
