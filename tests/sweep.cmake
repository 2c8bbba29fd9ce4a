# batch-sweep (issue 21): the steps/tokens trade-off fit on points drawn from
# McCandlish et al.'s formula, and the command end to end on a tiny model.
add_executable(test_critical_batch test_critical_batch.c)
target_link_libraries(test_critical_batch PRIVATE bs_sweep)
add_test(NAME sweep_fit COMMAND test_critical_batch)
add_test(NAME sweep_cli COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_batch_sweep.py)
set_tests_properties(sweep_cli PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 300)
add_executable(test_lr_choice test_lr_choice.c)
target_link_libraries(test_lr_choice PRIVATE bs_sweep)
add_test(NAME sweep_lr_choice COMMAND test_lr_choice)
add_executable(test_schedule_bound test_schedule_bound.c)
target_link_libraries(test_schedule_bound PRIVATE bs_sweep)
add_test(NAME sweep_schedule_bound COMMAND test_schedule_bound)

bs_tier(unit TESTS sweep_fit sweep_lr_choice sweep_schedule_bound)
bs_tier(slow TESTS sweep_cli)
