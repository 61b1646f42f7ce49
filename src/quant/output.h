// Outputs of `mopt quantize`: a file (GGUF) or a folder (safetensors layouts), written under a temporary name beside
// the destination and renamed into place only once complete, so that no error (bad input, full disk, a failed write)
// leaves a partial model behind. The destination is checked before any work: an existing one is replaced only with
// `force`, and a folder only if it holds nothing but files (never a tree).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace mopt::quant {

// Checks that `path` can be written: its parent folder exists; if `path` exists, `force` is set and it is of the
// kind written (a file for a file, a folder of plain files for a folder). Errors say what to do.
Status check_destination(const std::string& path, bool is_dir, bool force);

// Free bytes on the file system that holds `path`'s parent folder; an error if it cannot be read.
Result<uint64_t> free_bytes_near(const std::string& path);

// What an output file and an output folder share: the final name, the temporary name beside it (a hidden
// ".<name>.mopt-tmp-XXXXXX"), and whether the temporary was renamed into place. Not copyable: the destructor of
// each removes its uncommitted temporary.
class StagedOutput {
 public:
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;
  const std::string& final_path() const { return final_path_; }
  const std::string& tmp_path() const { return tmp_path_; }

 protected:
  explicit StagedOutput(std::string final_path) : final_path_(std::move(final_path)) {}
  ~StagedOutput() = default;
  // The mkstemp / mkdtemp template of the temporary name.
  std::string tmp_template() const;

  std::string tmp_path_, final_path_;
  bool committed_ = false;
};

// A file written sequentially under a temporary name; commit() renames it to its final name. Destroyed without a
// commit, it removes the temporary file.
class OutputFile : public StagedOutput {
 public:
  static Result<std::unique_ptr<OutputFile>> create(const std::string& final_path);
  ~OutputFile();

  // Appends n bytes. A failed write (ENOSPC: "no space left on device", EIO, ...) is an error naming the file.
  Status write(const void* data, size_t n);
  // Appends zero bytes up to the next multiple of `alignment`.
  Status pad_to(uint64_t alignment);
  uint64_t offset() const { return offset_; }
  // Flushes to disk and renames into place (replacing an existing file).
  Status commit();

 private:
  using StagedOutput::StagedOutput;
  int fd_ = -1;
  uint64_t offset_ = 0;
};

// A folder filled under a temporary name; files are created inside it with file(); commit() renames it to its final
// name (an existing folder of plain files is replaced). Destroyed without a commit, it removes what it wrote.
class OutputDir : public StagedOutput {
 public:
  static Result<std::unique_ptr<OutputDir>> create(const std::string& final_path);
  ~OutputDir();

  // A file `name` (a plain name) inside the folder; commit it (OutputFile::commit) before the folder's commit.
  Result<std::unique_ptr<OutputFile>> file(const std::string& name);
  // Writes a whole small file.
  Status write_file(const std::string& name, const std::string& content);
  Status commit();

 private:
  using StagedOutput::StagedOutput;
};

// Test hook for the full-disk case: once `bytes` more bytes have been written through OutputFile (in this process),
// every further write fails as a full disk does (ENOSPC). nullopt turns it off.
void set_write_fault_after(std::optional<uint64_t> bytes);

}  // namespace mopt::quant
