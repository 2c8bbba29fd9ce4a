# sched.cmake: pipeline schedules as data (src/parallel/schedule.h): the
# generated lists validate and simulate to the closed-form bubbles, and the
# validator rejects hand-made bad lists.
add_executable(test_schedule ${CMAKE_CURRENT_SOURCE_DIR}/test_schedule.c)
target_link_libraries(test_schedule PRIVATE bscore)
add_test(NAME schedule COMMAND test_schedule)

bs_tier(unit TESTS schedule)
