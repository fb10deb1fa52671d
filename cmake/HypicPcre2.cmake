# PCRE2 (8-bit code units, UTF-8 + Unicode properties) for the tokenizer's pre-split pattern.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HYPIC_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
add_library(hypic::pcre2 ALIAS PkgConfig::HYPIC_PCRE2)
