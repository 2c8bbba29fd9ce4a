# bf16.cmake: bf16 conversion and the oneDNN bf16 linear layer (prefix bf16_).
#
# The double-precision gradient checks compile src/kernels/*.c again without
# bscore; the bf16 files compute in float and bf16 by design (and need oneDNN
# and core/), so they are taken out of that build here.
#
# Each bf16 check comes in two tests: the widened-fp32 path (runs on every
# CPU) and the oneDNN path (*_onednn), which exits 77 (BS_SKIP) and prints why
# where oneDNN has no bf16 matmul (oneDNN 2.6 below AVX-512: an AVX2-only AMD
# EPYC, or ONEDNN_MAX_CPU_ISA=AVX2), so CTest counts it as skipped. All but the
# 300-step convergence run are registered again under the AVX2 kernels
# (bs_isa_test, *_isa_avx2), where the oneDNN ones skip.
get_target_property(GRADCHECK_SOURCES test_gradcheck SOURCES)
list(FILTER GRADCHECK_SOURCES EXCLUDE REGEX "/src/kernels/(bf16|matmul_bf16)\\.c$")
set_target_properties(test_gradcheck PROPERTIES SOURCES "${GRADCHECK_SOURCES}")

add_executable(test_bf16 test_bf16.c)
target_link_libraries(test_bf16 PRIVATE bscore)
add_executable(bf16_driver test_bf16_driver.c)
target_link_libraries(bf16_driver PRIVATE bscore)
set(BF16_ENV "BATCHSCALE=${BS};BF16_DRIVER=$<TARGET_FILE:bf16_driver>")

foreach(path widen onednn)
  set(suffix "")
  if(path STREQUAL "onednn")
    set(suffix "_onednn")
  endif()
  bs_isa_test(NAME bf16_kernels${suffix} COMMAND $<TARGET_FILE:test_bf16> ${path})
  bs_isa_test(NAME bf16_torch${suffix}
              COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_torch.py $<TARGET_FILE:bf16_driver> ${path})
  # The model in bf16: against fp32 and PyTorch's bf16 autocast.
  bs_isa_test(NAME bf16_model${suffix}
              COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_model.py --dump $<TARGET_FILE:gpt_dump>
                      --driver $<TARGET_FILE:bf16_driver> --path ${path})
endforeach()

# Training in bf16: layouts against one process, resume, flags (on the path auto
# picks); oneDNN against widen; 300 steps against fp32 (once: a convergence claim,
# not a kernel's bits; labelled slow, as it runs no code bf16_train does not, so
# `make asan` (-LE slow) skips it).
bs_isa_test(NAME bf16_train COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_train.py layouts
            ENVIRONMENT ${BF16_ENV} PROPERTIES TIMEOUT 900)
bs_isa_test(NAME bf16_train_onednn COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_train.py onednn
            ENVIRONMENT ${BF16_ENV} PROPERTIES TIMEOUT 900)
add_test(NAME bf16_train_convergence COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_bf16_train.py convergence)
set_tests_properties(bf16_train_convergence PROPERTIES ENVIRONMENT "${BF16_ENV}" TIMEOUT 900 LABELS long)
# Its bf16 run is fp8_train_convergence's too (fp8.cmake; tests/harness/bf16_reference.py).
set(BS_BF16_300 ${BS_KJV_FIXTURE}/bf16_300)
set_property(TEST bf16_train_convergence APPEND PROPERTY ENVIRONMENT BS_BF16_300=${BS_BF16_300})
set_tests_properties(bf16_train_convergence PROPERTIES FIXTURES_SETUP bf16_300)

bs_tier(unit TESTS bf16_kernels bf16_kernels_onednn)
bs_tier(peers TESTS bf16_torch bf16_torch_onednn bf16_model bf16_model_onednn)
bs_tier(layouts TESTS bf16_train bf16_train_onednn)
bs_tier(slow TESTS bf16_train_convergence)
bs_uses_kjv(TESTS bf16_train_convergence)
