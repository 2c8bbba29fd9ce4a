# device.cmake: the device seam (src/device/) and its kernels (prefix device_).
# Every check runs through `sim` on any machine; the `gpu` label marks the
# same checks on a CUDA GPU, which skip (exit 77, with the reason) where none
# answers and fail instead under BS_REQUIRE_GPU=1.
add_executable(test_device_kernels test_device_kernels.c)
target_link_libraries(test_device_kernels PRIVATE bscore)
add_executable(test_device_sim test_device_sim.c)
target_link_libraries(test_device_sim PRIVATE bscore)

add_test(NAME device_kernels_sim COMMAND test_device_kernels sim)
add_test(NAME device_sim_seam COMMAND test_device_sim sim)
add_test(NAME device_kernels_gpu COMMAND test_device_kernels cuda)
add_test(NAME device_seam_gpu COMMAND test_device_sim cuda)
set_tests_properties(device_kernels_sim device_sim_seam PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
set_tests_properties(device_kernels_gpu device_seam_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT OMP_NUM_THREADS=1)

# The whole GPT-2 step on the device against the CPU model (model/gpt_device.h).
add_executable(test_gpt_device test_gpt_device.c)
target_link_libraries(test_gpt_device PRIVATE bscore)
add_test(NAME device_gpt_sim COMMAND test_gpt_device sim)
add_test(NAME device_gpt_gpu COMMAND test_gpt_device cuda)
set_tests_properties(device_gpt_sim PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
set_tests_properties(device_gpt_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP} ENVIRONMENT OMP_NUM_THREADS=1)

# train --device sim|cuda against --device cpu through the CLI.
add_test(NAME device_train_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_train.py sim)
add_test(NAME device_train_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_train.py cuda)
set_tests_properties(device_train_sim PROPERTIES LABELS device ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
set_tests_properties(device_train_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")

# --precision bf16 on the device against the CPU's bf16, within 4 x the floor
# of tests/layout_floor.py measured beside it.
add_test(NAME device_bf16_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_bf16.py sim)
add_test(NAME device_bf16_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_bf16.py cuda)
set(DEVICE_BF16_ENV "BATCHSCALE=${BS};BF16_DRIVER=$<TARGET_FILE:bf16_driver>;OMP_NUM_THREADS=1")
set_tests_properties(device_bf16_sim PROPERTIES LABELS device ENVIRONMENT "${DEVICE_BF16_ENV}")
set_tests_properties(device_bf16_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT "${DEVICE_BF16_ENV}")

# scripts/gpu-check.sh holds to its time budget (runs without a GPU: no bundle, it stops after unpacking).
add_test(NAME device_gpu_check_budget COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_check_budget.py)
set_tests_properties(device_gpu_check_budget PROPERTIES LABELS device)

# The PyTorch GPU peer of scripts/gpu-check.sh keeps running: without a GPU it
# says so in one line; with one, a tiny model's figures.
add_test(NAME device_torch_peer COMMAND ${PY} ${PROJECT_SOURCE_DIR}/bench/gpu_torch_gpt.py --steps 2 --warmup 0
  --L 1 --H 1 --C 32 --V 100 --T 16 --B 1 --modes eager-fp32)
set_tests_properties(device_torch_peer PROPERTIES LABELS device
  PASS_REGULAR_EXPRESSION "no CUDA GPU visible to torch; nothing measured|\"tokens_per_s\"")

bs_tier(unit TESTS device_kernels_sim device_sim_seam device_gpt_sim device_train_sim device_gpu_check_budget)
bs_tier(slow TESTS device_kernels_gpu device_seam_gpu device_gpt_gpu device_train_gpu device_bf16_sim device_bf16_gpu)
bs_tier(peers TESTS device_torch_peer)
