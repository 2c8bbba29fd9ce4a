# lora.cmake: LoRA under every layout it composes with, its memory,
# checkpoints and bad input (tests/test_lora.py; against peft: hf.cmake).
add_test(NAME lora_layouts COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_lora.py)
set_tests_properties(lora_layouts PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 900)
