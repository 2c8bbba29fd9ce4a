# src/optim tests: optimizers against PyTorch and numpy transcriptions of the
# papers (sharded and not), batch schedules, lr scaling, gradient noise scale.
add_executable(opt_driver opt_driver.c)
target_link_libraries(opt_driver PRIVATE bscore)

add_executable(test_opt_noise test_opt_noise.c)
target_link_libraries(test_opt_noise PRIVATE bscore)

add_test(NAME opt_reference COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_opt_ref.py $<TARGET_FILE:opt_driver>)
add_test(NAME opt_batch COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_opt_batch.py $<TARGET_FILE:opt_driver>)
add_test(NAME opt_noise_scale COMMAND test_opt_noise)

# The preconditioned and curvature noise scales and the goodput choice on a quadratic with known H and Sigma.
add_executable(test_opt_estimators test_opt_estimators.c)
target_link_libraries(test_opt_estimators PRIVATE bscore)
add_test(NAME opt_estimators COMMAND test_opt_estimators)
set_tests_properties(opt_estimators PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")

bs_tier(unit TESTS opt_batch opt_noise_scale opt_estimators)
bs_tier(peers TESTS opt_reference)
