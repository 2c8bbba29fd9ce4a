# tok.cmake: tokenizer and data-preparation tests (prefix tok_).
#
# utf8proc (Unicode categories for GPT-2's pre-tokenisation) is linked into
# bscore here until the top-level CMakeLists.txt does it; linking it twice
# is harmless.
if(NOT TARGET PkgConfig::UTF8PROC)
  pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
  target_link_libraries(bscore PUBLIC PkgConfig::UTF8PROC)
endif()
