// Atomic outputs (quant/output.h): nothing appears under the final name before a commit, nothing is left behind
// without one, the full-disk hook fails writes as ENOSPC does, and --force replaces only what it may.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/mmap.h"
#include "quant/output.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

using quant::OutputDir;
using quant::OutputFile;
using test::dir_entries;
using test::fails_with;
using test::file_exists;

TEST(QuantOutput, FileAppearsOnlyWhenCommitted) {
  const std::string dir = test::scratch_dir(), path = dir + "/out.bin";
  {
    auto f = OutputFile::create(path);
    ASSERT_TRUE(f);
    ASSERT_TRUE((*f)->write("abc", 3).is_ok());
    ASSERT_TRUE((*f)->pad_to(8).is_ok());
    EXPECT_EQ((*f)->offset(), 8u);
    EXPECT_FALSE(file_exists(path));
    EXPECT_EQ(dir_entries(dir).size(), 1u);  // the temporary file
    ASSERT_TRUE((*f)->commit().is_ok());
  }
  EXPECT_EQ(*read_file(path), std::string("abc\0\0\0\0\0", 8));
  EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"out.bin"});
  {
    auto f = OutputFile::create(dir + "/other.bin");
    ASSERT_TRUE((*f)->write("x", 1).is_ok());
  }  // no commit
  EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"out.bin"});
}

TEST(QuantOutput, WriteFaultIsAFullDisk) {
  const std::string dir = test::scratch_dir();
  quant::set_write_fault_after(100);
  {
    auto f = OutputFile::create(dir + "/out.bin");
    std::vector<char> buf(64, 'x');
    EXPECT_TRUE((*f)->write(buf.data(), buf.size()).is_ok());
    EXPECT_TRUE(fails_with((*f)->write(buf.data(), buf.size()), "No space left on device"));
  }
  quant::set_write_fault_after(std::nullopt);
  EXPECT_TRUE(dir_entries(dir).empty());
}

TEST(QuantOutput, DestinationRules) {
  const std::string dir = test::scratch_dir();
  EXPECT_TRUE(quant::check_destination(dir + "/new.gguf", false, false).is_ok());
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/no/such/x.gguf", false, false), "does not exist"));
  test::write_text(dir + "/old.gguf", "x");
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/old.gguf", false, false), "pass --force"));
  EXPECT_TRUE(quant::check_destination(dir + "/old.gguf", false, true).is_ok());
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/old.gguf", true, true), "is not a folder"));
  ::mkdir((dir + "/model").c_str(), 0755);
  test::write_text(dir + "/model/config.json", "{}");
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/model", true, false), "pass --force"));
  EXPECT_TRUE(quant::check_destination(dir + "/model", true, true).is_ok());
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/model", false, true), "is not a file"));
  ::mkdir((dir + "/model/sub").c_str(), 0755);
  EXPECT_TRUE(fails_with(quant::check_destination(dir + "/model", true, true), "not a plain file"));
}

TEST(QuantOutput, FolderReplacesTheOldOneOnCommit) {
  const std::string dir = test::scratch_dir(), out = dir + "/model";
  ::mkdir(out.c_str(), 0755);
  test::write_text(out + "/stale.txt", "old");
  {
    auto d = OutputDir::create(out);
    ASSERT_TRUE(d);
    ASSERT_TRUE((*d)->write_file("config.json", "{}").is_ok());
    EXPECT_TRUE(file_exists(out + "/stale.txt"));  // untouched until the commit
    ASSERT_TRUE((*d)->commit().is_ok());
  }
  EXPECT_EQ(dir_entries(out), std::vector<std::string>{"config.json"});
  EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"model"});
  {
    auto d = OutputDir::create(dir + "/other");
    ASSERT_TRUE((*d)->write_file("a", "b").is_ok());
  }  // no commit: removed
  EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"model"});
}

}  // namespace
}  // namespace mopt
