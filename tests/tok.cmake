# tok.cmake: tokenizer and data-preparation tests (prefix tok_).
#
# utf8proc (Unicode categories for GPT-2's pre-tokenisation) is linked into
# bscore here until the top-level CMakeLists.txt does it; linking it twice
# is harmless.

set(GPT2_VOCAB_DIR ${CMAKE_CURRENT_SOURCE_DIR}/data/gpt2)

add_executable(test_tok_unit test_tok_unit.c)
target_link_libraries(test_tok_unit PRIVATE bscore)
add_test(NAME tok_unit COMMAND test_tok_unit ${GPT2_VOCAB_DIR} ${CMAKE_CURRENT_BINARY_DIR})

add_executable(test_tok_loader test_tok_loader.c)
target_link_libraries(test_tok_loader PRIVATE bscore)

foreach(t gpt2)
  add_test(NAME tok_${t} COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_tok_${t}.py)
  set_tests_properties(tok_${t} PROPERTIES ENVIRONMENT "BATCHSCALE=${BS};TOK_LOADER=$<TARGET_FILE:test_tok_loader>")
endforeach()

add_test(NAME tok_data COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_tok_data.py)
set_tests_properties(tok_data PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}")

bs_tier(unit TESTS tok_unit tok_data)
bs_tier(peers TESTS tok_gpt2)
