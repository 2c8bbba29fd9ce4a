# cc.cmake: compressed communication (prefix cc_): codecs, compressed
# collectives under mpirun with 1..4 ranks (oversubscribed), qgZ on emulated
# nodes, 1-bit Adam.
set(CC_MPIRUN mpirun --allow-run-as-root --oversubscribe --bind-to none)

add_executable(test_cc_codec test_cc_codec.c)
target_link_libraries(test_cc_codec PRIVATE bscore)
# codecs: vectorized encoders (their bits must not depend on the ISA: also the isa-avx2 pass)
bs_isa_test(NAME cc_codec COMMAND $<TARGET_FILE:test_cc_codec>)

foreach(t collectives onebit)
  add_executable(test_cc_${t} test_cc_${t}.c)
  target_link_libraries(test_cc_${t} PRIVATE bscore)
  foreach(n 1 2 3 4)
    add_test(NAME cc_${t}_np${n} COMMAND ${CC_MPIRUN} -np ${n} $<TARGET_FILE:test_cc_${t}>)
    list(APPEND CC_LAYOUT_TESTS cc_${t}_np${n})
    set_tests_properties(cc_${t}_np${n} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
  endforeach()
endforeach()

# ZeRO++'s qgZ reduce-scatter: nodes x ranks per node emulated with --ranks-per-node
add_executable(test_cc_qgz test_cc_qgz.c)
target_link_libraries(test_cc_qgz PRIVATE bscore)
foreach(layout 1x1 2x1 1x2 3x1 1x3 4x1 2x2 1x4)
  string(REPLACE "x" ";" nodes_ranks ${layout})
  list(GET nodes_ranks 0 nodes)
  list(GET nodes_ranks 1 per_node)
  math(EXPR n "${nodes} * ${per_node}")
  add_test(NAME cc_qgz_${layout} COMMAND ${CC_MPIRUN} -np ${n} $<TARGET_FILE:test_cc_qgz> ${per_node})
  list(APPEND CC_LAYOUT_TESTS cc_qgz_${layout})
  set_tests_properties(cc_qgz_${layout} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
endforeach()

# Codecs and the compressed all-reduce driven from Python: formats against
# numpy and PyTorch (test_cc_formats.py core), against ml_dtypes from the venv
# scripts/test-venv.sh makes (... ml_dtypes: skipped, with the reason, where
# it is missing), and bench/bench_compress.py.
add_executable(cc_driver test_cc_driver.c)
target_link_libraries(cc_driver PRIVATE bscore)
if(DEFINED ENV{BS_TEST_VENV})
  set(BS_TEST_VENV $ENV{BS_TEST_VENV})
else()
  set(BS_TEST_VENV $ENV{HOME}/.cache/batchscale/test-venv)
endif()
bs_isa_test(NAME cc_formats COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_cc_formats.py $<TARGET_FILE:cc_driver> core)
bs_isa_test(NAME cc_formats_ml_dtypes
            COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_cc_formats.py $<TARGET_FILE:cc_driver> ml_dtypes
            ENVIRONMENT "BS_TEST_PYTHON=${BS_TEST_VENV}/bin/python")

# Compressed communication in training: convergence on the shipped corpus
# (2 and 4 ranks), bytes per step, checkpointed residuals, ZeRO++, 1-bit Adam
# under ZeRO-1, bad flags.
add_test(NAME cc_train_mechanics COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_cc_train.py mechanics)
foreach(n 2 4)
  add_test(NAME cc_train_convergence_np${n} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_cc_train.py convergence ${n})
  list(APPEND CC_TRAIN_TESTS cc_train_convergence_np${n})
endforeach()
set_tests_properties(cc_train_mechanics ${CC_TRAIN_TESTS} PROPERTIES
  ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 900)
# the convergence runs are long and exercise no code the mechanics test does not: `make asan` (-LE slow) skips them
set_tests_properties(${CC_TRAIN_TESTS} PROPERTIES LABELS long)

bs_tier(unit TESTS cc_codec cc_formats)
bs_tier(peers TESTS cc_formats_ml_dtypes)
bs_tier(layouts TESTS ${CC_LAYOUT_TESTS} cc_train_mechanics)
bs_tier(slow TESTS ${CC_TRAIN_TESTS})
bs_uses_kjv(TESTS ${CC_TRAIN_TESTS})
