#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace mopt::uni {

Decoded decode(std::string_view s, size_t pos) {
  Decoded d;
  const size_t n = s.size();
  if (pos >= n) return d;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {b0, 1, true};
  // Expected length and the allowed range of the second byte (Unicode Table 3-7).
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kReplacement, 1, false};  // continuation byte or C0/C1/F5..FF
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= n) return {kReplacement, 0, false};  // incomplete, may still be completed
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {kReplacement, k, false};  // maximal subpart ends before b
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need, true};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacement;
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

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Decoded d = decode(s, i);
    if (!d.valid) return false;
    i += d.len;
  }
  return true;
}

std::string sanitize(std::string_view s, bool keep_incomplete_tail, size_t* tail_len) {
  std::string out;
  out.reserve(s.size());
  if (tail_len) *tail_len = 0;
  size_t i = 0;
  while (i < s.size()) {
    Decoded d = decode(s, i);
    if (d.valid) {
      out.append(s.data() + i, d.len);
      i += d.len;
    } else if (d.len > 0) {
      append_utf8(out, kReplacement);
      i += d.len;
    } else {  // incomplete tail
      if (keep_incomplete_tail) {
        if (tail_len) *tail_len = s.size() - i;
      } else {
        append_utf8(out, kReplacement);
      }
      break;
    }
  }
  return out;
}

size_t seq_len(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

namespace {

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points < 324 cover the whole image
  ByteMap() {
    from_cp.fill(-1);
    // Printable Latin-1 bytes map to themselves; the others to 256, 257, ... in byte order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

bool in_ranges(const tables::CpRange* r, size_t n, uint32_t cp) {
  const tables::CpRange* end = r + n;
  const tables::CpRange* it =
      std::upper_bound(r, end, cp, [](uint32_t c, const tables::CpRange& x) { return c < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}

template <class M>
const M* find_map(const M* m, size_t n, uint32_t cp) {
  const M* end = m + n;
  const M* it = std::lower_bound(m, end, cp, [](const M& x, uint32_t c) { return x.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return byte_map().to_cp[b]; }
int cp_to_byte(uint32_t cp) { return cp < byte_map().from_cp.size() ? byte_map().from_cp[cp] : -1; }

bool is_punctuation(uint32_t cp) { return in_ranges(tables::kPunctuation, tables::kPunctuation_size, cp); }
bool is_other(uint32_t cp) { return in_ranges(tables::kOther, tables::kOther_size, cp); }
bool is_nonspacing_mark(uint32_t cp) {
  return in_ranges(tables::kNonspacingMark, tables::kNonspacingMark_size, cp);
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void append_lower(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (const auto* m = find_map(tables::kLowercase, tables::kLowercase_size, cp)) {
    for (uint32_t k = 0; k < m->n; ++k) append_utf8(out, m->to[k]);
  } else {
    append_utf8(out, cp);
  }
}

void append_strip_accents(std::string& out, uint32_t cp) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllable: algorithmic decomposition into jamo (no marks)
    const uint32_t s = cp - 0xAC00;
    append_utf8(out, 0x1100 + s / (21 * 28));
    append_utf8(out, 0x1161 + (s % (21 * 28)) / 28);
    if (s % 28 != 0) append_utf8(out, 0x11A7 + s % 28);
    return;
  }
  if (cp >= 0x80 && is_nonspacing_mark(cp)) return;
  if (const auto* m = find_map(tables::kStripAccents, tables::kStripAccents_size, cp)) {
    for (uint32_t k = 0; k < m->n; ++k) append_utf8(out, m->to[k]);
  } else {
    append_utf8(out, cp);
  }
}

}  // namespace mopt::uni
