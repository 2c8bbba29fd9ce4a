# Data parallelism against the single-process oracle, accounting, faults.
add_test(NAME dp_equivalence COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_dp.py)
set_tests_properties(dp_equivalence PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 900)

bs_tier(layouts TESTS dp_equivalence)
