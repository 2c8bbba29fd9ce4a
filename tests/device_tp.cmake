# device_tp.cmake: tensor parallelism on device buffers (model/gpt_device_tp.h): a shard's device step on sim
# under mpirun against one CPU process, and what sim catches (C, 2 ranks); `train --device sim --tp 2` (and x dp 2)
# against one CPU process, its checkpoint on CPU layouts, its refusal (Python).
add_executable(test_gpt_device_tp test_gpt_device_tp.c)
target_link_libraries(test_gpt_device_tp PRIVATE bscore)
add_test(NAME device_tp_step_sim_np2 COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2
  $<TARGET_FILE:test_gpt_device_tp> sim)
set_tests_properties(device_tp_step_sim_np2 PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
add_test(NAME device_tp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_tp.py)
set_tests_properties(device_tp_sim PROPERTIES LABELS device TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
# The same on a GPU (2 ranks sharing it through the host path): skipped with the reason where none answers.
add_test(NAME device_tp_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_tp.py cuda)
set_tests_properties(device_tp_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP} TIMEOUT 600
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>;OMP_NUM_THREADS=1")
bs_tier(layouts TESTS device_tp_step_sim_np2 device_tp_sim)
bs_tier(slow TESTS device_tp_gpu)
