#pragma once
// Small Unicode toolkit shared by the tokenizer and the answer metrics: UTF-8 decoding and
// validation, NFC normalisation, and lower-casing exactly as Python's str.lower() does it.
// The data tables are generated from Python's unicodedata by scripts/golden/make_unicode_tables.py.
#include <cstddef>
#include <string>
#include <string_view>

namespace hypic::unicode {

// Decodes one code point of valid UTF-8 at s[pos] and advances pos. On an invalid or
// truncated sequence it returns false and advances pos by the length of the maximal invalid
// subpart (at least one byte), as Unicode's "U+FFFD substitution of maximal subparts" rule.
bool next_code_point(std::string_view s, size_t& pos, char32_t& cp);

// Byte offset of the first invalid UTF-8 sequence, or std::string_view::npos when valid.
size_t find_invalid_utf8(std::string_view s);

// Replaces every maximal invalid subpart by U+FFFD (as Rust's from_utf8_lossy and Python's
// bytes.decode("utf-8", "replace")).
std::string to_valid_utf8(std::string_view s);

void append_utf8(std::string& out, char32_t cp);

// NFC (canonical decomposition, canonical ordering, canonical composition). The input must
// be valid UTF-8. Text that passes the NFC quick check is returned unchanged without work.
std::string nfc(std::string_view s);

// Python str.lower(): full lower-case mappings, including the final-sigma rule. Valid UTF-8.
std::string python_lower(std::string_view s);

// Python str.isspace() for one code point (what str.split() with no argument splits on).
bool is_python_space(char32_t cp);

// Unicode White_Space (Rust char::is_whitespace).
bool is_white_space(char32_t cp);

}  // namespace hypic::unicode
