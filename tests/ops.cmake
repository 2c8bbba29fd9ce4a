# ops.cmake: operations tests (prefix ops_, issue 20): logs off a terminal,
# preemption under `batchscale run`, the network-namespace test hosts and the
# multi-host runs on them, configuration files.
add_test(NAME ops_logs COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_logs.py)
set_tests_properties(ops_logs PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 300)
add_test(NAME ops_preempt COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_preempt.py)
set_tests_properties(ops_preempt PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 300)
# How a job under mpirun ends: errors once, no MPI_ABORT banner, exit statuses (issue 48).
add_test(NAME ops_exit COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_exit.py)
set_tests_properties(ops_exit PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 300)
# The test hosts (network namespaces) need root; without it these skip (77).
add_test(NAME ops_hosts COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_hosts.py)
add_test(NAME ops_hosts_netem COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_hosts.py --netem)
set_tests_properties(ops_hosts ops_hosts_netem PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL ON)
add_test(NAME ops_multihost COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_multihost.py)
set_tests_properties(ops_multihost PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77 TIMEOUT 300
                                              RUN_SERIAL ON)
add_test(NAME ops_config COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_config.py)
set_tests_properties(ops_config PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 120)
# TensorBoard's reader runs in the test venv (scripts/test-venv.sh); without it that part skips visibly.
if(DEFINED ENV{BS_TEST_VENV})
  set(BS_OPS_VENV $ENV{BS_TEST_VENV})
else()
  set(BS_OPS_VENV $ENV{HOME}/.cache/batchscale/test-venv)
endif()
add_test(NAME ops_tensorboard COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_tensorboard.py)
set_tests_properties(ops_tensorboard PROPERTIES TIMEOUT 180
                     ENVIRONMENT "BATCHSCALE=${BS};BS_TEST_PYTHON=${BS_OPS_VENV}/bin/python")
# --log-grad-norm-per-rank: each rank's local gradient norm in the metrics (issue 46's feature-module demonstration).
add_test(NAME ops_grad_norm_ranks COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_grad_norm_ranks.py)
set_tests_properties(ops_grad_norm_ranks PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 180)
add_test(NAME ops_report COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_report.py)
add_test(NAME ops_report_browser COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_report.py --browser)
set_tests_properties(ops_report ops_report_browser PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 180
                                                               SKIP_RETURN_CODE 77)
# A one-node SLURM cluster (munged, slurmctld, slurmd from Debian) runs examples/train.sbatch; skips (77) without root.
# Not alone: the cluster is private (its own directory, key, socket, free ports), nothing is timed, its waits are
# bounded at 30-60 s for what takes seconds, and its job mostly waits (rank 0 slowed 40x, rank 1 yielding).
add_test(NAME ops_slurm COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_ops_slurm.py)
set_tests_properties(ops_slurm PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" SKIP_RETURN_CODE 77 TIMEOUT 300)

bs_tier(layouts TESTS ops_grad_norm_ranks)
bs_tier(slow TESTS ops_logs ops_preempt ops_exit ops_hosts ops_hosts_netem ops_multihost ops_config ops_tensorboard
        ops_report ops_report_browser ops_slurm)
