# sft.cmake: supervised fine-tuning data (prepare --format chat-jsonl, loss
# masks, attention inside packed documents) against PyTorch.
add_test(NAME sft_reference COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_sft.py)
set_tests_properties(sft_reference PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};GPT_DUMP=$<TARGET_FILE:gpt_dump>" TIMEOUT 600)
# Against transformers in the Hugging Face venv (BS_HF_VENV, set in hf.cmake): skipped (77) without it.
add_test(NAME sft_hf COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_sft_hf.py)
set_tests_properties(sft_hf PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 ENVIRONMENT
  "BATCHSCALE=${BS};GPT_DUMP=$<TARGET_FILE:gpt_dump>;BS_HF_PYTHON=${BS_HF_VENV}/bin/python")

bs_tier(peers TESTS sft_reference sft_hf)
