// Shared helpers of the model tests: where the shared models are, scratch directories.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
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

// A fresh scratch directory for the current test (removed by the OS temp cleaner, not by us).
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir() + "mopt_model_" + std::to_string(::getpid()) + "_" +
                    info->test_suite_name() + "_" + info->name();
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

}  // namespace mopt::test

// The shared models are part of the test setup: a missing one is a failure, not a skip.
#define REQUIRE_MODEL(path) \
  ASSERT_TRUE(::mopt::test::file_exists(path)) << "test model not found: " << (path) << " (set MOPT_MODELS_DIR)"
