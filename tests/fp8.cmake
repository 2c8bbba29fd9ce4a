# fp8.cmake: FP8 formats, quantization, the FP8 linear layer (the seam) and
# delayed scaling (prefix fp8_).
#
# The double-precision gradient checks compile src/kernels/*.c again without
# bscore; the fp8 files compute in float by design (and need core/), so they
# are taken out of that build here, as bf16.cmake does for bf16.
get_target_property(GRADCHECK_SOURCES test_gradcheck SOURCES)
list(FILTER GRADCHECK_SOURCES EXCLUDE REGEX "/src/kernels/(fp8|matmul_fp8)\\.c$")
set_target_properties(test_gradcheck PROPERTIES SOURCES "${GRADCHECK_SOURCES}")

add_executable(fp8_driver test_fp8_driver.c)
target_link_libraries(fp8_driver PRIVATE bscore)
if(NOT DEFINED BS_TEST_VENV)
  set(BS_TEST_VENV $ENV{HOME}/.cache/batchscale/test-venv)
endif()
# formats against ml_dtypes (skipped, with the reason, without the venv of scripts/test-venv.sh);
# quantization, the seam and delayed scaling against numpy transcriptions
bs_isa_test(NAME fp8_formats COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8.py $<TARGET_FILE:fp8_driver> formats
            ENVIRONMENT "BS_TEST_PYTHON=${BS_TEST_VENV}/bin/python")
bs_isa_test(NAME fp8_kernels COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8.py $<TARGET_FILE:fp8_driver> kernels)

# Training in FP8: layouts against one FP8 process within a measured floor, resume across precisions, bad flags;
# 300 KJV steps against bf16 and the outlier (slow: it runs no code fp8_train does not).
add_test(NAME fp8_train COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8_train.py layouts)
add_test(NAME fp8_train_convergence COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8_train.py convergence)
set_tests_properties(fp8_train fp8_train_convergence PROPERTIES ENVIRONMENT
                     "BATCHSCALE=${BS};BF16_DRIVER=$<TARGET_FILE:bf16_driver>" TIMEOUT 900)
set_tests_properties(fp8_train_convergence PROPERTIES LABELS long FIXTURES_REQUIRED bf16_300)
set_property(TEST fp8_train_convergence APPEND PROPERTY ENVIRONMENT BS_BF16_300=${BS_BF16_300}) # bf16.cmake

bs_tier(unit TESTS fp8_kernels)
bs_tier(peers TESTS fp8_formats)
bs_tier(layouts TESTS fp8_train)
bs_tier(slow TESTS fp8_train_convergence)
bs_uses_kjv(TESTS fp8_train_convergence)
