#include "core/strings.h"

#include <gtest/gtest.h>

namespace mopt {
namespace {

TEST(Strings, SplitNonemptyDropsEmptyPieces) {
  EXPECT_EQ(split_nonempty("1,2,4", ','), (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_EQ(split_nonempty(",a,,b,", ','), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(split_nonempty("a;b=1", ';'), (std::vector<std::string>{"a", "b=1"}));
  EXPECT_TRUE(split_nonempty("", ',').empty());
  EXPECT_TRUE(split_nonempty(",,", ',').empty());
  EXPECT_EQ(split_nonempty("one", ','), (std::vector<std::string>{"one"}));
}

TEST(Strings, CaseAndBlanks) {
  EXPECT_EQ(lower("AbC\xc3\x89"), "abc\xc3\x89");  // UTF-8 bytes pass through
  EXPECT_EQ(upper("abc"), "ABC");
  EXPECT_EQ(trim_blanks(" \tx y\t "), "x y");
}

}  // namespace
}  // namespace mopt
