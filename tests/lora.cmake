# lora.cmake: LoRA under every layout it composes with, its memory,
# checkpoints and bad input (tests/test_lora.py; against peft: hf.cmake).
add_test(NAME lora_layouts COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_lora.py)
set_tests_properties(lora_layouts PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 900)

# QLoRA's NF4 frozen base (tests/test_nf4.py): model/nf4.c value for value
# against a transcription of bitsandbytes' algorithm, the model's dequantized
# base bit for bit, and the base streamed into its format (peak memory).
add_executable(nf4_driver test_nf4_driver.c)
target_link_libraries(nf4_driver PRIVATE bscore)
add_test(NAME lora_nf4 COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_nf4.py $<TARGET_FILE:nf4_driver>)
set_tests_properties(lora_nf4 PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 900)

bs_tier(peers TESTS lora_peft lora_nf4)
bs_tier(layouts TESTS lora_layouts)
