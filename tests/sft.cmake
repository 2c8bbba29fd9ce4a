# sft.cmake: supervised fine-tuning data (prepare --format chat-jsonl, loss
# masks, attention inside packed documents) against PyTorch.
add_test(NAME sft_reference COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_sft.py)
set_tests_properties(sft_reference PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};GPT_DUMP=$<TARGET_FILE:gpt_dump>" TIMEOUT 600)
