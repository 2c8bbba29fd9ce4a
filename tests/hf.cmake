# hf.cmake: safetensors files and Hugging Face GPT-2 both ways, and LoRA against peft
# (tests/test_hf_peer.py in the venv scripts/hf-venv.sh makes; skipped, with
# the reason, without it).
if(DEFINED ENV{BS_HF_VENV})
  set(BS_HF_VENV $ENV{BS_HF_VENV})
else()
  set(BS_HF_VENV $ENV{HOME}/.cache/batchscale/hf-venv)
endif()
add_test(NAME hf_safetensors COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_hf_peer.py)
set_tests_properties(hf_safetensors PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT
  "BATCHSCALE=${BS};GPT_DUMP=$<TARGET_FILE:gpt_dump>;BS_HF_PYTHON=${BS_HF_VENV}/bin/python")
add_test(NAME lora_peft COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_lora_peer.py)
set_tests_properties(lora_peft PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT
  "BATCHSCALE=${BS};BS_HF_PYTHON=${BS_HF_VENV}/bin/python")

bs_tier(peers TESTS hf_safetensors)
