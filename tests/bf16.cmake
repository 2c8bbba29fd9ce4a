# bf16.cmake: bf16 conversion and the oneDNN bf16 linear layer (prefix bf16_).
#
# The double-precision gradient checks compile src/kernels/*.c again without
# bscore; the bf16 files compute in float and bf16 by design (and need oneDNN
# and core/), so they are taken out of that build here.
get_target_property(GRADCHECK_SOURCES test_gradcheck SOURCES)
list(FILTER GRADCHECK_SOURCES EXCLUDE REGEX "/src/kernels/(bf16|matmul_bf16)\\.c$")
set_target_properties(test_gradcheck PROPERTIES SOURCES "${GRADCHECK_SOURCES}")

add_executable(test_bf16 test_bf16.c)
target_link_libraries(test_bf16 PRIVATE bscore)
add_test(NAME bf16_kernels COMMAND test_bf16)

add_executable(bf16_driver test_bf16_driver.c)
target_link_libraries(bf16_driver PRIVATE bscore)
add_test(NAME bf16_torch COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_torch.py $<TARGET_FILE:bf16_driver>)

# The model in bf16: against fp32 and PyTorch's bf16 autocast, and training in bf16.
add_test(NAME bf16_model COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_model.py --dump $<TARGET_FILE:gpt_dump>)
add_test(NAME bf16_train COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_train.py)
set_tests_properties(bf16_train PROPERTIES ENVIRONMENT "BATCHSCALE=$<TARGET_FILE:batchscale>" TIMEOUT 900)
