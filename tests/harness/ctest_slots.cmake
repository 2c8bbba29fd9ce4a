# ctest_slots.cmake: how `ctest -j N` shares the machine among the tests (make test and make check run
# ctest -j $(nproc)). Included at the end of tests/CMakeLists.txt, once every area has registered its tests.
#
# - A test that keeps several processes or threads busy at once takes that many of ctest's slots (PROCESSORS;
#   ctest runs a test asking for more than -j alone): mpirun tests their rank count; Python tests that launch
#   layouts under mpirun, or run with 2 threads, 2 (their largest phase on this 2-core machine). Why not fewer:
#   MPI's and OpenMP's waits spin, so ranks sharing a core with another test's process each wait out the
#   other's time slice (bw.cmake: two ranks of two threads on two cores took 38 s instead of 3). A Python test
#   that starts ranks but mostly waits (launches, timeouts, kills, one process at a time: its CPU time at most
#   its wall time alone) keeps 1 slot: see the list below.
# - Such a test gets BS_TEST_SLOTS, its slots capped at the machine's cores: tests/bstest.py's `concurrently`
#   runs that many of the test's independent one-process runs at once.
# - The tests that time something (a bound they assert, or a timing they print) run alone (RUN_SERIAL): the
#   multi-host tests set it in ops.cmake (the split backward's timing, which asserts nothing, is `make bench`'s).
# - Each test has its own OpenMPI session directories (OMPI_MCA_orte_tmpdir_base): every isolated singleton (a
#   process started without mpirun, tests/CMakeLists.txt) uses the same one under the base, and two tests side by
#   side could remove it under each other (tests/bstest.py's `process` does the same for one test's own runs).
# - OpenMP threads sleep at once when they wait (OMP_WAIT_POLICY=passive) instead of spinning first (libgomp spins
#   about 300,000 turns): a test's idle threads then leave the core to the test beside it. The results are the
#   same bits (the policy changes no arithmetic). On the shared 2-core Intel Xeon (load about 12), 40 steps of a
#   tiny model on 2 threads took 6.6 CPU s spinning and 0.4 passive, test_backward_split widen 8.4 and 1.3. So do
#   OpenMPI's ranks (OMPI_MCA_mpi_yield_when_idle=1: a rank that waits in MPI yields its core between polls, what
#   OpenMPI does by itself only for more ranks than cores): 2 ranks of which one waits for a slow one (20 steps,
#   --debug-inject-fault slow:0:10) took 3.5 CPU s and 0.2. Not in the tests that run alone (RUN_SERIAL): no test
#   beside them, and the timings they print are a default run's.
# - COST: the seconds each long test took on this machine (an Intel Xeon, 2 cores, idle), so that ctest starts
#   them first and the run does not end on one of them alone; after one run ctest uses the times it measured.
cmake_host_system_information(RESULT BS_CORES QUERY NUMBER_OF_LOGICAL_CORES)

# bs_slots(N TESTS name...): the tests keep N processes or threads busy.
function(bs_slots n)
  cmake_parse_arguments(S "" "" "TESTS" ${ARGN})
  set(cap ${n})
  if(cap GREATER BS_CORES)
    set(cap ${BS_CORES})
  endif()
  foreach(t ${S_TESTS})
    if(NOT TEST ${t})
      message(FATAL_ERROR "ctest_slots.cmake: no test named ${t} (renamed? update tests/harness/ctest_slots.cmake)")
    endif()
  endforeach()
  set_tests_properties(${S_TESTS} PROPERTIES PROCESSORS ${n})
  set_property(TEST ${S_TESTS} APPEND PROPERTY ENVIRONMENT BS_TEST_SLOTS=${cap})
endfunction()

string(MD5 build_id ${CMAKE_BINARY_DIR})
string(SUBSTRING ${build_id} 0 8 build_id)
get_property(every_test DIRECTORY PROPERTY TESTS)
foreach(t ${every_test})
  set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT OMPI_MCA_orte_tmpdir_base=/tmp/bs-ompi-${build_id}/${t})
endforeach()

# mpirun tests: their rank count
foreach(n 2 3 4)
  bs_slots(${n} TESTS cc_collectives_np${n} cc_onebit_np${n} device_comm_sim_np${n})
endforeach()
bs_slots(2 TESTS device_comm_sim_timeout)
bs_slots(4 TESTS device_comm_sim_np4_nodes_of_2)
foreach(n 2 3 4 5 6 7 8)
  bs_slots(${n} TESTS comm_collectives_np${n})
endforeach()
bs_slots(4 TESTS comm_collectives_np4_nodes_of_2)
bs_slots(6 TESTS comm_collectives_np6_nodes_of_2 comm_collectives_np6_nodes_of_3)
bs_slots(8 TESTS comm_collectives_np8_nodes_of_2 comm_collectives_np8_nodes_of_4)
bs_slots(2 TESTS cc_qgz_2x1 cc_qgz_1x2 bw_split_tp2 cp_attention_np2 moe_parallel_np2 device_tp_step_sim_np2)
bs_slots(3 TESTS cc_qgz_3x1 cc_qgz_1x3 train_policy_np3)
bs_slots(4 TESTS cc_qgz_4x1 cc_qgz_2x2 cc_qgz_1x4 cp_attention_np4 moe_parallel_np4)

# Python tests whose runs under mpirun (2 to 8 ranks) or on 2 threads, or MPICH's mpiexec (2 to 4 ranks), keep 2 cores
# busy: their CPU time (user + sys) above their wall time alone.
bs_slots(2 TESTS bf16_train bf16_train_isa_avx2 cc_train_convergence_np2 cc_train_convergence_np4
         comm_mpich_build_and_run fp8_train fp8_train_convergence moe_accum moe_ep_zero moe_model moe_pipeline
         ops_grad_norm_ranks ops_tensorboard device_cp_sim)
bs_slots(2 TESTS bf16_train_convergence) # its fp32 and bf16 runs side by side
# These start ranks too but keep 1 slot: CPU time / wall time alone on the idle machine, 2026-12-06 (evening):
# cp_equivalence 38.1/32.2, pipeline_schedules 16.9/18.5, device_dp_sim 8.3/8.8, mp_equivalence 7.1/7.9,
# batch_scaling 10.7/9.2, cc_train_mechanics 7.8/6.3, recompute_layouts 6.0/4.9, moe_tp 5.2/4.5, moe_ep 5.0/4.5,
# lora_layouts 3.9/4.8, device_pp_sim 4.0/7.3, device_tp_sim 1.7/3.5, device_graphs_dp_sim 0.9/0.9 (their ranks
# mostly wait on each other; those above keep 1.35-1.97 cores busy); and measured 2026-12-06 at nice -10 on the
# shared machine (CPU seconds) against the idle machine's wall time (seconds): dp_equivalence 15/18.5,
# diloco_reference 5.6/10.8, ft_ckpt 7.3/22, ft_restart 4.2/14, guards 7.4/11, lora_nf4 31/31 (its memory checks:
# each process's own peak, which a neighbour does not move), moe_export 4.8/4.6, ops_exit 1.5/13.7,
# ops_preempt 3.7/5.5, sft_reference 4.6/4.6, ops_config and ops_logs under 1 s; device_pptp_sim (two of its
# layouts on 8 ranks) 15.2/27.7 CPU/wall seconds, OMP_NUM_THREADS=1, on the shared machine at load 9 (2026-12-06).


# OpenMP's and OpenMPI's waits leave the core (see above) but in the tests that run alone.
foreach(t ${every_test})
  get_test_property(${t} RUN_SERIAL alone)
  if(NOT alone)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT OMP_WAIT_POLICY=passive OMPI_MCA_mpi_yield_when_idle=1)
  endif()
endforeach()

# Seconds on the 2-core Intel Xeon (make test, 2026-12-06, 215 tests): the long tests start first.
foreach(cost_test ft_fuzz:91 device_fp8_sim:65 fp8_train:45 device_precision_cp_sim:41 fp8_train_convergence:37 ops_multihost:32
                  cp_equivalence:29 cc_train_convergence_np4:28 dp_equivalence:26 lora_nf4:25
                  cc_train_convergence_np2:24 ft_ckpt:24 device_cp_sim:24 plan_python:19 ft_restart:17 ops_exit:17
                  tok_gpt2:17 lora_peft:16 bench_gpu_scripts:16 pipeline_schedules:15 ops_slurm:15 hf_safetensors:13
                  guards:13 sweep_fit:13 diloco_reference:11 bf16_train_isa_avx2:11 device_bf16_sim:11
                  cc_collectives_np4:11 mp_equivalence:10 sft_hf:10)
  string(REPLACE ":" ";" cost_test ${cost_test})
  list(GET cost_test 0 name)
  list(GET cost_test 1 seconds)
  set_tests_properties(${name} PROPERTIES COST ${seconds})
endforeach()
