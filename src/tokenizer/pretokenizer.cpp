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

// GPT-2's regex as in its tokenizer.json (ByteLevel use_regex=true).
const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct BuiltinPre {
  std::vector<std::string> names;
  std::vector<std::string> regexes;
};

// The pre-tokenizers of the models llama.cpp names in tokenizer.ggml.pre, written as their Hugging Face
// tokenizer.json Split patterns (the regex strings are facts about those tokenizers).
const std::vector<BuiltinPre>& builtin_pres() {
  static const std::vector<BuiltinPre> pres = {
      {{"gpt-2", "default", "mpt", "olmo", "jais", "gpt2", "phi-2", "stablelm"}, {kGpt2Regex}},
      {{"llama3", "llama-bpe", "dbrx", "smaug-bpe"}, {kLlama3Regex}},
      {{"qwen2", "stablelm2"}, {kQwen2Regex}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2Regex}},
      {{"deepseek-llm"},
       {"[\r\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
        "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
        "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
        "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
        "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
        "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-"
        "\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
        "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
        "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
        "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
        "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
        "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
        "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
        "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-"
        "\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$",
        "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"}},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                           "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}},
      {{"falcon"},
       {R"([\p{P}\$\+<=>\^~\|`]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        "[0-9][0-9][0-9]"}},
  };
  return pres;
}

}  // namespace


const std::vector<std::string>* builtin_pre_regexes(std::string_view pre) {
  for (const BuiltinPre& p : builtin_pres())
    for (const std::string& n : p.names)
      if (n == pre) return &p.regexes;
  return nullptr;
}

std::string builtin_pre_name(const std::vector<std::string>& regexes) {
  for (const BuiltinPre& p : builtin_pres())
    if (p.regexes == regexes) return p.names[0];
  return std::string();
}

}  // namespace mopt
