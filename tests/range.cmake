# range.cmake: core/range.h (intersection, containment, offsets) and the
# split of layers over pipeline stages (parallel/grid.h), both pure arithmetic.
add_executable(test_range test_range.c)
target_link_libraries(test_range PRIVATE bscore)
add_test(NAME range_unit COMMAND test_range)

bs_tier(unit TESTS range_unit)
