# Pipeline schedules as action lists (gpipe, 1f1b, interleaved, zbh1) against the single-process oracle.
add_test(NAME pipeline_schedules COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_pipeline_schedules.py)
set_tests_properties(pipeline_schedules PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 1200)

bs_tier(layouts TESTS pipeline_schedules)
