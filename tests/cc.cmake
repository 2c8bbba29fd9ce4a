# cc.cmake: compressed communication (prefix cc_): codecs, compressed
# collectives under mpirun with 1..4 ranks (oversubscribed), 1-bit Adam.
set(CC_MPIRUN mpirun --allow-run-as-root --oversubscribe --bind-to none)

add_executable(test_cc_codec test_cc_codec.c)
target_link_libraries(test_cc_codec PRIVATE bscore)
add_test(NAME cc_codec COMMAND test_cc_codec)
