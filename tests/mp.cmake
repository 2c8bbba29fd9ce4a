# Tensor, pipeline and 3D parallelism against the single-process oracle.
add_test(NAME mp_equivalence COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_model_parallel.py)
set_tests_properties(mp_equivalence PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 1200)

bs_tier(layouts TESTS mp_equivalence)
