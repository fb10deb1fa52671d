#include "model/unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <vector>

namespace hypic::unicode {
namespace {

struct CccRun {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;
  uint8_t composes;
};
struct Range {
  char32_t first, last;
};
struct LowerMapping {
  char32_t cp;
  char32_t to[3];
};

#include "model/unicode_tables.inc"

// Hangul syllable arithmetic (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

template <size_t N>
bool in_ranges(const Range (&table)[N], char32_t cp) {
  auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                             [](char32_t c, const Range& r) { return c < r.first; });
  return it != std::begin(table) && cp <= std::prev(it)->last;
}

uint8_t ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kCccRuns), std::end(kCccRuns), cp,
                             [](char32_t c, const CccRun& r) { return c < r.first; });
  if (it == std::begin(kCccRuns)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const Decomposition* find_decomposition(char32_t cp) {
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != std::end(kDecompositions) && it->cp == cp ? &*it : nullptr;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = cp < 0xC0 ? nullptr : find_decomposition(cp);
  if (!d) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second) decompose(d->second, out);
}

uint64_t pair_key(char32_t a, char32_t b) {
  return (uint64_t(a) << 32) | b;
}

const std::unordered_map<uint64_t, char32_t>& composition_map() {
  static const std::unordered_map<uint64_t, char32_t> map = [] {
    std::unordered_map<uint64_t, char32_t> m;
    for (const auto& d : kDecompositions)
      if (d.composes) m.emplace(pair_key(d.first, d.second), d.cp);
    return m;
  }();
  return map;
}

// The primary composite of (a, b), or 0 when there is none.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& m = composition_map();
  auto it = m.find(pair_key(a, b));
  return it == m.end() ? 0 : it->second;
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < s.size()) cps.push_back(next_code_point(s, pos, cp) ? cp : 0xFFFD);
  return cps;
}

const LowerMapping* find_lower(char32_t cp) {
  auto it = std::lower_bound(std::begin(kLower), std::end(kLower), cp,
                             [](const LowerMapping& m, char32_t c) { return m.cp < c; });
  return it != std::end(kLower) && it->cp == cp ? &*it : nullptr;
}

bool is_cased(char32_t cp) {
  return in_ranges(kCased, cp);
}
bool is_case_ignorable(char32_t cp) {
  return in_ranges(kCaseIgnorable, cp);
}

// Python's Final_Sigma test for the capital sigma at cps[i].
bool final_sigma(const std::vector<char32_t>& cps, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
  if (j == 0 || !is_cased(cps[j - 1])) return false;
  size_t k = i + 1;
  while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
  return k == cps.size() || !is_cased(cps[k]);
}

}  // namespace

bool next_code_point(std::string_view s, size_t& pos, char32_t& cp) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  }
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    ++pos;
    return false;
  }
  size_t i = pos + 1;
  for (int k = 0; k < need; ++k, ++i) {
    if (i >= s.size() || byte(i) < lo || byte(i) > hi) {
      pos = i;
      return false;
    }
    cp = (cp << 6) | (byte(i) & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  pos = i;
  return true;
}

size_t find_invalid_utf8(std::string_view s) {
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t at = pos;
    if (!next_code_point(s, pos, cp)) return at;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  if (find_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    if (next_code_point(s, pos, cp))
      out.append(s.substr(at, pos - at));
    else
      out += "\xEF\xBF\xBD";
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// NFC of a stretch that begins at a stable starter (or the text start) and ends before one.
void nfc_region(std::string_view s, std::string& out) {
  std::vector<char32_t> d;
  d.reserve(s.size() + 8);
  for (char32_t c : code_points(s)) decompose(c, d);
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + long(i), d.begin() + long(j),
                     [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> r;
  r.reserve(d.size());
  long starter = -1;
  for (char32_t c : d) {
    const uint8_t cc = ccc(c);
    if (starter >= 0) {
      const bool adjacent = static_cast<long>(r.size()) - 1 == starter;
      const uint8_t last = adjacent ? 0 : ccc(r.back());
      if (adjacent || (last != 0 && last < cc)) {
        if (char32_t composite = compose(r[size_t(starter)], c)) {
          r[size_t(starter)] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(r.size());
    r.push_back(c);
  }
  for (char32_t c : r) append_utf8(out, c);
}

// True for a code point that is its own NFC in any context and never combines with what
// precedes it (combining class 0, NFC quick check Yes): a safe place to cut the text.
bool nfc_stable(char32_t cp) {
  return cp < 0x300 || (ccc(cp) == 0 && !in_ranges(kNfcQcNotYes, cp));
}

}  // namespace

std::string nfc(std::string_view s) {
  // Stable stretches are copied; each unstable stretch, from the last stable code point
  // before it to the next one after it, is normalised on its own.
  std::string out;
  size_t copied = 0, last_stable = 0, pos = 0;
  char32_t cp = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0xCC) {  // lead bytes below 0xCC encode < U+0300
      if ((static_cast<unsigned char>(s[pos]) & 0xC0) != 0x80) last_stable = pos;
      ++pos;
      continue;
    }
    const size_t at = pos;
    next_code_point(s, pos, cp);
    if (nfc_stable(cp)) {
      last_stable = at;
      continue;
    }
    size_t end = pos;
    while (end < s.size()) {
      size_t next = end;
      next_code_point(s, next, cp);
      if (nfc_stable(cp)) break;
      end = next;
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.substr(copied, last_stable - copied));
    nfc_region(s.substr(last_stable, end - last_stable), out);
    copied = last_stable = pos = end;
  }
  if (copied == 0) return std::string(s);
  out.append(s.substr(copied));
  return out;
}

std::string python_lower(std::string_view s) {
  bool ascii = true;
  for (char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  std::string out;
  out.reserve(s.size());
  if (ascii) {
    for (char ch : s) out += (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch - 'A' + 'a') : ch;
    return out;
  }
  const std::vector<char32_t> cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (c == 0x3A3) {
      append_utf8(out, final_sigma(cps, i) ? 0x3C2 : 0x3C3);
      continue;
    }
    const LowerMapping* m = find_lower(c);
    if (!m) {
      append_utf8(out, c);
      continue;
    }
    for (char32_t t : m->to)
      if (t) append_utf8(out, t);
  }
  return out;
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace hypic::unicode
