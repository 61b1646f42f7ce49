#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace mopt {

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::create(const std::vector<std::string>& regexes) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  if (regexes.empty()) return error("pre-tokenizer: no regexes given");
  for (const std::string& re : regexes) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return error("pre-tokenizer regex /%s/ does not compile at offset %zu: %s", re.c_str(),
                   static_cast<size_t>(err_off), reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is used if it fails
    s->codes_.push_back(code);
  }
  return s;
}

RegexSplitter::~RegexSplitter() {
  for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (void* cv : codes_) {
    auto* code = static_cast<pcre2_code*>(cv);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    MOPT_CHECK(md != nullptr, "pcre2_match_data_create_from_pattern failed (out of memory)");
    next.clear();
    for (std::string_view piece : pieces) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0, pos = 0;
      while (pos < piece.size()) {
        int rc = pcre2_match(code, subj, piece.size(), pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking state on the heap
          rc = pcre2_match(code, subj, piece.size(), pos, PCRE2_NO_JIT, md, nullptr);
        if (rc < 0) break;  // no further match (or a match/heap-limit error: the rest stays one piece)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t mb = ov[0], me = ov[1];
        if (me <= mb) {  // empty match: step over one character
          pos = mb + uni::seq_len(static_cast<uint8_t>(piece[mb < piece.size() ? mb : piece.size() - 1]));
          continue;
        }
        if (mb > gap_start) next.push_back(piece.substr(gap_start, mb - gap_start));
        next.push_back(piece.substr(mb, me - mb));
        gap_start = pos = me;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace mopt
