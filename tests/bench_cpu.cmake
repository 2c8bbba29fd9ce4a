# `batchscale bench cpu` (the kernels the benchmarks record) against /proc/cpuinfo, Debian's OpenBLAS and a
# forced lesser ISA; the forced case is skipped (77) on a CPU without AVX2.
foreach(case default forced)
  add_test(NAME bench_cpu_${case} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_cpu.py ${case})
  set_tests_properties(bench_cpu_${case} PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>"
                       SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()

# The GPU measurement scripts without a GPU (one line, exit 0) and on tiny shapes on the CPU (--smoke).
add_test(NAME bench_gpu_scripts COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_gpu_scripts.py)
set_tests_properties(bench_gpu_scripts PROPERTIES TIMEOUT 300)

# bench/bench_schedule_race.py's arithmetic (modelled seconds to the target, paired differences, the verdict) on
# hand-made metrics.
add_test(NAME bench_schedule_race COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_schedule_race.py)
set_tests_properties(bench_schedule_race PROPERTIES TIMEOUT 60)

bs_tier(unit TESTS bench_schedule_race bench_cpu_default bench_cpu_forced)
bs_tier(slow TESTS bench_gpu_scripts)
