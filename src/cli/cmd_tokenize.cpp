// mopt tokenize: prints the token ids of a text (no BOS/EOS, special-token text not parsed unless asked).
//   mopt tokenize -m MODEL TEXT | --file F [--parse-special] [--add-special] [--show-pieces]
// MODEL: a GGUF file (vocab-only files work), a Hugging Face folder, or a llama2.c checkpoint;
// --tokenizer PATH reads a llama2.c tokenizer .bin directly.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/mmap.h"
#include "model/model.h"
#include "model/vocab_load.h"
#include "tokenizer/tokenizer.h"

namespace mopt::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string file;
  bool parse_special = false;
  bool add_special = false;
  bool show_pieces = false;
};

Result<VocabData> load_vocab(const TokenizeArgs& a) {
  if (!a.tokenizer.empty()) return vocab_from_llama2c(a.tokenizer);
  struct stat st {};
  if (::stat(a.model.c_str(), &st) != 0) return error("cannot open model '%s'", a.model.c_str());
  if (S_ISDIR(st.st_mode)) return vocab_from_hf_dir(a.model);  // no need to map the weights
  LoadOptions opts;
  char magic[4] = {0, 0, 0, 0};
  if (FILE* f = std::fopen(a.model.c_str(), "rb")) {
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    opts.vocab_only = got == 4 && std::memcmp(magic, "GGUF", 4) == 0;  // GGUF: read only the tokenizer
  }
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, load_model(a.model, opts));
  return std::move(m->vocab);
}

// Printable form of a piece for --show-pieces: control characters and invalid bytes escaped.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7F) out += strfmt("\\x%02X", c);
    else out += static_cast<char>(c);
  }
  return out;
}

int tokenize(const TokenizeArgs& a) {
  if (a.model.empty() && a.tokenizer.empty()) {
    std::fprintf(stderr, "mopt tokenize: give a model (-m MODEL) or a llama2.c tokenizer (--tokenizer PATH)\n");
    return 2;
  }
  if (!a.file.empty() && !a.text.empty()) {
    std::fprintf(stderr, "mopt tokenize: give either TEXT or --file F, not both\n");
    return 2;
  }
  std::string text = a.text;
  if (!a.file.empty()) {
    Result<std::string> t = read_file(a.file);
    if (!t) {
      std::fprintf(stderr, "mopt tokenize: %s\n", t.message().c_str());
      return 1;
    }
    text = std::move(t).value();
  }
  Result<VocabData> vocab = load_vocab(a);
  if (!vocab) {
    std::fprintf(stderr, "mopt tokenize: %s\n", vocab.message().c_str());
    return 1;
  }
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::create(*vocab);
  if (!tok) {
    std::fprintf(stderr, "mopt tokenize: %s\n", tok.message().c_str());
    return 1;
  }
  const std::vector<int32_t> ids = (*tok)->encode(text, a.add_special, a.parse_special);
  if (a.show_pieces) {
    for (int32_t id : ids)
      std::printf("%d\t%s\n", id, printable((*tok)->piece(id, /*render_special=*/true)).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

Registration reg("tokenize", 60, [](CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", args->model, "Model: a GGUF file (vocab-only is fine), a Hugging Face folder, or a llama2.c checkpoint");
  cmd->add_option("--tokenizer", args->tokenizer, "A llama2.c tokenizer .bin (tok512.bin), used instead of the model's");
  cmd->add_option("text", args->text, "Text to tokenize");
  cmd->add_option("-f,--file", args->file, "Read the text from this file (bytes as they are, newlines included)");
  cmd->add_flag("--parse-special", args->parse_special, "Text of special tokens (<|im_start|>) maps to their ids");
  cmd->add_flag("--add-special", args->add_special, "Add the BOS/EOS tokens the vocab asks for");
  cmd->add_flag("--show-pieces", args->show_pieces, "Print one token per line: id, then its text");
  cmd->callback([args]() { set_exit_code(tokenize(*args)); });
});

}  // namespace
}  // namespace mopt::cli
