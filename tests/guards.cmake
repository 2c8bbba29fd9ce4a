# Guards (non-finite values, loss spikes, consecutive skips) and stragglers (--balance).
add_test(NAME guards COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_guards.py)
set_tests_properties(guards PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 600)

bs_tier(slow TESTS guards)
