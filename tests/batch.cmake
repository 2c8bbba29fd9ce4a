# Batch-size scaling through the trainer (schedules, lr rules, optimizers under ZeRO, noise scale).
add_test(NAME batch_scaling COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_batch_scaling.py)
set_tests_properties(batch_scaling PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 900)

bs_tier(layouts TESTS batch_scaling)
