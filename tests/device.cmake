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

# bs_device_pair(NAME PROGRAM): tests/PROGRAM.c built, run as device_NAME_sim
# (unit tier) and device_NAME_gpu (`cuda`, label gpu, slow tier).
function(bs_device_pair name program)
  add_executable(${program} ${program}.c)
  target_link_libraries(${program} PRIVATE bscore)
  add_test(NAME device_${name}_sim COMMAND ${program} sim)
  add_test(NAME device_${name}_gpu COMMAND ${program} cuda)
  set_tests_properties(device_${name}_sim PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
  set_tests_properties(device_${name}_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
    ENVIRONMENT OMP_NUM_THREADS=1)
  bs_tier(unit TESTS device_${name}_sim)
  bs_tier(slow TESTS device_${name}_gpu)
endfunction()

# Fused attention (device/flash_math.h) against the unfused kernel, the CPU's
# and, through --io, PyTorch's attention (peers tier).
bs_device_pair(flash test_device_flash)
add_test(NAME device_flash_torch COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_flash_torch.py $<TARGET_FILE:test_device_flash>)
set_tests_properties(device_flash_torch PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
bs_tier(peers TESTS device_flash_torch)
# Its timing against the unfused kernel (scripts/gpu-check.sh at GPT-2 124M's shapes); here a tiny run on sim.
add_executable(bench_device_attention bench_device_attention.c)
target_link_libraries(bench_device_attention PRIVATE bscore)
add_test(NAME device_attention_bench_sim COMMAND bench_device_attention sim 2 40 32 2 2)
set_tests_properties(device_attention_bench_sim PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1
  PASS_REGULAR_EXPRESSION "\"kernel\": \"flash2\".*forward_backward_ms.*\n.*\"kernel\": \"causal\".*forward_backward_ms")
bs_tier(unit TESTS device_attention_bench_sim)

# The fused classifier (device/classifier_math.h, model/classifier_device.h) against the CPU's cross-entropy.
bs_device_pair(classifier test_device_classifier)

# FP8 on the device (device/fp8_math.h, device/fp8_gemm.h): quantization bit for bit and the layer's products
# within the summation-order bound of the CPU's emulation, with the same statistics.
bs_device_pair(fp8_gemm test_device_fp8_gemm)
# The fused residual + layernorm kernel and --activations bf16 against the plain device path.
bs_device_pair(acts_bf16 test_device_acts_bf16)
# The MoE kernels (device/moe_math.h) against model/moe.c's token side.
bs_device_pair(moe_kernels test_device_moe_kernels)
# The optimizer fused over all tensors (device/adamw_math.h) bit for bit against one launch per tensor.
bs_device_pair(adamw test_device_adamw)

# The whole GPT-2 step on the device against the CPU model (model/gpt_device.h).
add_executable(test_gpt_device test_gpt_device.c)
target_link_libraries(test_gpt_device PRIVATE bscore)
add_test(NAME device_gpt_sim COMMAND test_gpt_device sim)
add_test(NAME device_gpt_gpu COMMAND test_gpt_device cuda)
set_tests_properties(device_gpt_sim PROPERTIES LABELS device ENVIRONMENT OMP_NUM_THREADS=1)
set_tests_properties(device_gpt_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP} ENVIRONMENT OMP_NUM_THREADS=1)

# The step replayed from graphs (--cuda-graphs: model/step_graphs.h) bitwise against its launches, a
# learning rate captured by value caught on sim, and the seam's capture rules.
bs_device_pair(graphs test_gpt_device_graphs)
# The same through `train --cuda-graphs on|off` (fp32, bf16, a batch ramp that recaptures) and its refusals.
# Over 2 data-parallel ranks (ZeRO 0 and 1) in the layouts tier.
add_test(NAME device_graphs_train_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_graphs.py sim DeviceGraphsTest)
add_test(NAME device_graphs_dp_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_graphs.py sim
  DeviceGraphsLayoutsTest)
add_test(NAME device_graphs_train_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_graphs.py cuda)
set_tests_properties(device_graphs_train_sim device_graphs_dp_sim PROPERTIES LABELS device
  ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
set_tests_properties(device_graphs_train_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
bs_tier(unit TESTS device_graphs_train_sim)
bs_tier(layouts TESTS device_graphs_dp_sim)
bs_tier(slow TESTS device_graphs_train_gpu)

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

# --activations bf16 through the CLI: ten steps within 4 x the floor (against the CPU's bf16 and the plain device
# path), sim's memory with and without, the refusals.
foreach(part floor memory refusals)
  add_test(NAME device_acts_bf16_${part}_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_acts_bf16.py sim -k ${part})
  set_tests_properties(device_acts_bf16_${part}_sim PROPERTIES LABELS device ENVIRONMENT "${DEVICE_BF16_ENV}")
endforeach()
add_test(NAME device_acts_bf16_floor_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_acts_bf16.py cuda -k floor)
set_tests_properties(device_acts_bf16_floor_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT "${DEVICE_BF16_ENV}")
bs_tier(unit TESTS device_acts_bf16_memory_sim device_acts_bf16_refusals_sim)
# The device memory's high-water mark in the metrics (device_memory_peak) against sim's --sim-memory.
add_test(NAME device_memory_peak_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_memory_peak.py)
set_tests_properties(device_memory_peak_sim PROPERTIES LABELS device ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
bs_tier(unit TESTS device_memory_peak_sim)
bs_tier(slow TESTS device_acts_bf16_floor_sim device_acts_bf16_floor_gpu)

# --precision fp8 (delayed) on sim against the CPU's FP8 run: losses and parameters
# within 4 x the floor of tests/layout_floor.py, the amax history step for step
# within 4 x its own floor (step 1 bit for bit); what it does not run refused in one line.
add_test(NAME device_fp8_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_fp8.py sim)
set_tests_properties(device_fp8_sim PROPERTIES LABELS device ENVIRONMENT "${DEVICE_BF16_ENV}")
# the same on a GPU: cuBLASLt's FP8 GEMMs, the amax history step for step over the ten steps
add_test(NAME device_fp8_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_fp8.py cuda)
set_tests_properties(device_fp8_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
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
bs_tier(slow TESTS device_kernels_gpu device_seam_gpu device_gpt_gpu device_train_gpu device_bf16_sim device_bf16_gpu
  device_fp8_sim device_fp8_gpu)
bs_tier(peers TESTS device_torch_peer)

# MoE layers on the device (model/moe_device.h) against one CPU process, the
# refusals in one line; 2 data-parallel ranks against the CPU's (mpirun: the layouts tier).
add_test(NAME device_moe_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_moe.py sim)
add_test(NAME device_moe_ranks_sim COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_moe.py sim ranks)
add_test(NAME device_moe_gpu COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_device_moe.py cuda)
set_tests_properties(device_moe_sim device_moe_ranks_sim PROPERTIES LABELS device ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
set_tests_properties(device_moe_gpu PROPERTIES LABELS "device;gpu" SKIP_RETURN_CODE ${BS_SKIP}
  ENVIRONMENT "BATCHSCALE=${BS};OMP_NUM_THREADS=1")
bs_tier(unit TESTS device_moe_sim)
bs_tier(layouts TESTS device_moe_ranks_sim)
bs_tier(slow TESTS device_moe_gpu)
