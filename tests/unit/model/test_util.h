// Shared helpers of the model tests: where the shared models are, scratch directories.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "unit/fails_with.h"

namespace mopt::test {

inline std::string models_dir() {
  const char* env = std::getenv("MOPT_MODELS_DIR");
  return env && *env ? env : MOPT_MODELS_DIR;
}
inline std::string model_path(const std::string& rel) { return models_dir() + "/" + rel; }

inline bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// A fresh, empty scratch directory for the current test (left for the OS temp cleaner). The name holds the process
// id, which an earlier run may have had: what such a run left there is removed first.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir() + "mopt_model_" + std::to_string(::getpid()) + "_" +
                    info->test_suite_name() + "_" + info->name();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

}  // namespace mopt::test

// The shared models are part of the test setup: a missing one is a failure, not a skip.
#define REQUIRE_MODEL(path) \
  ASSERT_TRUE(::mopt::test::file_exists(path)) << "test model not found: " << (path) << " (set MOPT_MODELS_DIR)"
