#include "gate/selection.h"

#include <gtest/gtest.h>

namespace mopt::gate {
namespace {

TEST(GateSelection, DefaultIsEveryGateWithTheSoak) {
  const GateSelection all;
  EXPECT_TRUE(all.all());
  EXPECT_TRUE(all.needs_soak());
  EXPECT_EQ(all.names(), (std::vector<std::string>{"leak", "tail", "errors", "cuda_graphs", "accuracy", "resources",
                                                   "restart"}));
}

TEST(GateSelection, ParsesNamesInAnyOrderAndReportsThemInTheReportsOrder) {
  auto s = parse_gate_selection(" restart ,leak");
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->names(), (std::vector<std::string>{"leak", "restart"}));
  EXPECT_TRUE(s->has("leak"));
  EXPECT_FALSE(s->has("tail"));
  EXPECT_FALSE(s->has("no_such_gate"));
  EXPECT_FALSE(s->all());
  EXPECT_TRUE(s->needs_soak());
}

TEST(GateSelection, OnlyTheSoakGatesNeedTheSoak) {
  for (const char* g : {"leak", "tail", "errors", "cuda_graphs", "resources"}) {
    auto s = parse_gate_selection(g);
    ASSERT_TRUE(s) << g;
    EXPECT_TRUE(s->needs_soak()) << g;
  }
  auto s = parse_gate_selection("accuracy,restart");
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->needs_soak());
  EXPECT_EQ(s->names(), (std::vector<std::string>{"accuracy", "restart"}));
}

TEST(GateSelection, BadListsAreErrorsThatNameTheGates) {
  auto unknown = parse_gate_selection("leak,latency");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.message().find("unknown gate 'latency'"), std::string::npos) << unknown.message();
  EXPECT_NE(unknown.message().find("cuda_graphs, accuracy"), std::string::npos) << unknown.message();
  auto twice = parse_gate_selection("tail,tail");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.message().find("'tail' is named twice"), std::string::npos) << twice.message();
  for (const char* bad : {"", "  ", "leak,", ",leak", "leak,,tail"}) {
    auto r = parse_gate_selection(bad);
    EXPECT_FALSE(r) << "'" << bad << "'";
  }
  EXPECT_NE(parse_gate_selection("").message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace mopt::gate
