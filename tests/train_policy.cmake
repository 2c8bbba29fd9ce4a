# The trainer's policy pieces (guard, stragglers, --balance, the step's
# statistics) without a model: alone, and the statistics' all-gather on 3 ranks.
add_executable(test_train_policy test_train_policy.c)
target_link_libraries(test_train_policy PRIVATE bscore)
add_test(NAME train_policy COMMAND $<TARGET_FILE:test_train_policy>)
add_test(NAME train_policy_np3 COMMAND mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3
         $<TARGET_FILE:test_train_policy>)

bs_tier(unit TESTS train_policy)
bs_tier(layouts TESTS train_policy_np3)
