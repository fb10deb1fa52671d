#pragma once
// Text from a file as one printable line for a message: bytes outside printable ASCII (and the
// backslash) as \xNN, so a damaged key or fingerprint shows what is there without breaking the
// line or the terminal.
#include <cstdio>
#include <string>

namespace hypic {

inline std::string printable_bytes(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace hypic
