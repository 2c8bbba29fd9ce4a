# Only cli/ knows flag names: no library string holds a flag, and every
# subject key a library reason names has its flag in cli/subject_flags.c.
add_test(NAME library_reasons COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_library_reasons.py)
bs_tier(unit TESTS library_reasons)
