# device_tp.cmake: tensor parallelism on device buffers (model/gpt_device_tp.h): a shard's device step on sim
# under mpirun against one CPU process, and what sim catches (C, 2 ranks); `train --device sim --tp 2` (and x dp 2)
# against one CPU process, its checkpoint on CPU layouts, its refusal (Python).
add_executable(test_gpt_device_tp test_gpt_device_tp.c)
target_link_libraries(test_gpt_device_tp PRIVATE bscore)
add_test(NAME device_tp_step_sim_np2 COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2
  $<TARGET_FILE:test_gpt_device_tp> sim)
set_tests_properties(device_tp_step_sim_np2 PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
bs_tier(layouts TESTS device_tp_step_sim_np2)
bs_device_layouts(tp test_device_tp.py)
