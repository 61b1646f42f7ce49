#include <gtest/gtest.h>

#include "engine/stop_strings.h"

namespace mopt {
namespace {

TEST(StopStrings, HoldsBackPossibleStarts) {
  std::vector<std::string> stops{"</end>", "STOP"};
  StopScan s = scan_stop_strings("hello </e", stops);
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.emit, 6u);  // "</e" held
  s = scan_stop_strings("hello S", stops);
  EXPECT_EQ(s.emit, 6u);
  s = scan_stop_strings("hello", stops);
  EXPECT_EQ(s.emit, 5u);
  s = scan_stop_strings("", stops);
  EXPECT_EQ(s.emit, 0u);
  EXPECT_FALSE(s.stopped);
}

TEST(StopStrings, FindsEarliestMatch) {
  std::vector<std::string> stops{"STOP", "</end>"};
  StopScan s = scan_stop_strings("ab</end>cdSTOP", stops);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emit, 2u);
  s = scan_stop_strings("STOP", stops);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emit, 0u);
}

TEST(StopStrings, StreamedMatchAcrossDeltas) {
  // Feed one character at a time like a detokenizer would; the stop string and what follows never come out.
  std::vector<std::string> stops{"\n\nUser:"};
  const std::string text = "Answer: 42.\n\nUser: more";
  std::string held, emitted;
  bool stopped = false;
  for (char c : text) {
    held.push_back(c);
    StopScan s = scan_stop_strings(held, stops);
    emitted += held.substr(0, s.emit);
    held.erase(0, s.emit);
    if (s.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(emitted, "Answer: 42.");
}

TEST(StopStrings, Utf8StopNeverSplitsACharacter) {
  std::vector<std::string> stops{"é!"};
  StopScan s = scan_stop_strings("caf\xc3\xa9", stops);  // "café": the é may start "é!"
  EXPECT_EQ(s.emit, 3u);
}

}  // namespace
}  // namespace mopt
