// UTF-8 and Unicode helpers for the tokenizers: code point decoding with Unicode's well-formedness rules
// (Table 3-7), U+FFFD replacement by maximal subparts (as Rust's from_utf8_lossy / WHATWG do), the GPT-2
// byte <-> unicode map, and the character classes BERT's normalizer needs (the tables below: data in
// unicode_data.txt, written by scripts/gen_unicode_data.py and turned into C++ by the build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mopt::uni {

constexpr uint32_t kReplacement = 0xFFFD;

// Result of decoding one code point at s[pos]:
//   len > 0, valid   : a well-formed sequence of `len` bytes encoding `cp`;
//   len > 0, !valid  : an ill-formed maximal subpart of `len` bytes (one U+FFFD);
//   len == 0         : a well-formed prefix that runs past the end of `s` (more bytes may complete it).
struct Decoded {
  uint32_t cp = kReplacement;
  size_t len = 0;
  bool valid = false;
};
Decoded decode(std::string_view s, size_t pos);

void append_utf8(std::string& out, uint32_t cp);
bool is_valid_utf8(std::string_view s);
// Replaces every ill-formed subpart by U+FFFD. If `keep_incomplete_tail`, a trailing well-formed but
// incomplete sequence is not converted: its length is returned in *tail_len (and not appended).
std::string sanitize(std::string_view s, bool keep_incomplete_tail = false, size_t* tail_len = nullptr);
// Number of bytes of the UTF-8 sequence starting with `lead` (1 for continuation/invalid bytes).
size_t seq_len(uint8_t lead);

// GPT-2 byte-level BPE: each byte maps to a printable code point (bytes_to_unicode in GPT-2's encoder.py).
uint32_t byte_to_cp(uint8_t b);
int cp_to_byte(uint32_t cp);  // -1 when cp is not the image of a byte

// Character classes (Unicode general categories).
bool is_punctuation(uint32_t cp);     // P*
bool is_other(uint32_t cp);           // C* (Cc Cf Cn Co Cs)
bool is_nonspacing_mark(uint32_t cp); // Mn
bool is_white_space(uint32_t cp);     // the White_Space property
bool is_cjk(uint32_t cp);             // CJK ideographs as BERT's _is_chinese_char defines them
// Appends the full lowercase mapping of cp.
void append_lower(std::string& out, uint32_t cp);
// Appends NFD(cp) with nonspacing marks (Mn) removed (BERT's strip_accents for one character).
void append_strip_accents(std::string& out, uint32_t cp);

namespace tables {
struct CpRange {
  uint32_t lo, hi;
};
struct CpMap3 {
  uint32_t cp, n, to[3];
};
struct CpMap4 {
  uint32_t cp, n, to[4];
};
extern const CpRange kPunctuation[];
extern const size_t kPunctuation_size;
extern const CpRange kOther[];
extern const size_t kOther_size;
extern const CpRange kNonspacingMark[];
extern const size_t kNonspacingMark_size;
extern const CpMap3 kLowercase[];
extern const size_t kLowercase_size;
extern const CpMap4 kStripAccents[];
extern const size_t kStripAccents_size;
}  // namespace tables

}  // namespace mopt::uni
