# ft.cmake: fault-tolerance tests (prefix ft_): the restart launcher (kills,
# elastic shrink, signals), checkpoint write faults, corruption and fallback,
# resharding, llm.c import/export, and a bounded libFuzzer run of the
# manifest, checkpoint-file, token-shard and safetensors readers (built with clang).
foreach(t restart ckpt)
  add_test(NAME ft_${t} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ft_${t}.py)
  set_tests_properties(ft_${t} PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 600)
endforeach()
# A checkpoint write that runs out of space, on a small tmpfs (issue 48); skips (77) where mounting is not allowed.
add_test(NAME ft_full_disk COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ft_full_disk.py)
set_tests_properties(ft_full_disk PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77 TIMEOUT 300)
# 4 harnesses x 20 s; already sanitized, so `make asan` (-LE slow) skips it.
add_test(NAME ft_fuzz COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz.sh ${PROJECT_SOURCE_DIR}
                              ${CMAKE_CURRENT_BINARY_DIR}/fuzz 20)
set_tests_properties(ft_fuzz PROPERTIES TIMEOUT 600 LABELS long)

bs_tier(slow TESTS ft_restart ft_ckpt ft_full_disk ft_fuzz)
