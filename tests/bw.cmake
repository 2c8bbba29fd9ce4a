# bw.cmake: the split backward (B: input gradients, W: weight gradients, for
# the ZB-H1 schedule) against the fused backward, bit for bit (prefix bw_).
# fp32 and bf16 (widen, and oneDNN: skipped with the reason where it cannot
# run) through bs_isa_test, as their bits depend on the CPU's kernels; the
# tensor-parallel shards under mpirun with 2 ranks of one thread each (two
# ranks of two threads on two cores spin in MPI's waits: 38 s instead of 3).
add_executable(test_backward_split test_backward_split.c)
target_link_libraries(test_backward_split PRIVATE bscore)
bs_isa_test(NAME bw_split_fp32 COMMAND $<TARGET_FILE:test_backward_split> fp32)
bs_isa_test(NAME bw_split_bf16_widen COMMAND $<TARGET_FILE:test_backward_split> widen)
bs_isa_test(NAME bw_split_bf16_onednn COMMAND $<TARGET_FILE:test_backward_split> onednn)
# The fused backward against B and W timed on a larger model (`test_backward_split timing`) asserts
# nothing: it is a benchmark, run by `make bench` (bench/run.sh), not a test.
add_test(NAME bw_split_tp2 COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1
                                   -np 2 $<TARGET_FILE:test_backward_split> tp)

bs_tier(unit TESTS bw_split_fp32 bw_split_bf16_widen bw_split_bf16_onednn)
bs_tier(layouts TESTS bw_split_tp2)
