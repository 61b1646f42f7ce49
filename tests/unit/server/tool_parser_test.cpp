// Tool-call and reasoning parsers on outputs in the formats the model families document (Qwen's function-calling
// guide, Meta's Llama 3.1 prompt format, Mistral's function calling, DeepSeek-V3's chat template): the calls and
// the content, and the same result when the text arrives in pieces cut at every position (streaming); random edits
// of those outputs (hostile or broken model output) stream as they parse whole.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "server/reasoning.h"
#include "server/tool_markers.h"
#include "server/tool_parser.h"

namespace mopt::server {
namespace {

struct Call {
  std::string name, arguments;
  bool operator==(const Call&) const = default;
};
void PrintTo(const Call& c, std::ostream* os) { *os << "{" << c.name << ": " << c.arguments << "}"; }
struct Parsed {
  std::string content;
  std::vector<Call> calls;
};

void add(Parsed& p, const ParsedDelta& d) {
  p.content += d.content;
  for (const ToolCallDelta& c : d.calls) {
    if (c.start) {
      ASSERT_EQ(c.index, static_cast<int>(p.calls.size()));
      p.calls.push_back({c.name, ""});
    }
    ASSERT_LT(c.index, static_cast<int>(p.calls.size()));
    p.calls[static_cast<size_t>(c.index)].arguments += c.arguments;
  }
}

Parsed parse(ToolParserKind k, const std::vector<std::string>& pieces) {
  ToolCallParser p(k);
  Parsed out;
  for (const auto& s : pieces) add(out, p.feed(s));
  add(out, p.finish());
  return out;
}

// Whole, byte by byte, and cut in two at every position: all the same.
Parsed parse_all_ways(ToolParserKind k, const std::string& text) {
  const Parsed whole = parse(k, {text});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const Parsed each = parse(k, bytes);
  EXPECT_EQ(each.content, whole.content) << text;
  EXPECT_EQ(each.calls, whole.calls) << text;
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Parsed two = parse(k, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(two.content, whole.content) << "cut at " << cut;
    EXPECT_EQ(two.calls, whole.calls) << "cut at " << cut;
  }
  return whole;
}

TEST(ToolParser, HermesQwen) {
  const Parsed p = parse_all_ways(ToolParserKind::kHermes,
                                  "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
                                  "\"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
                                  "\"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", "
                                  "\"date\": \"2024-10-01\"}}\n</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0], (Call{"get_current_temperature", R"({"location": "San Francisco, CA, USA"})"}));
  EXPECT_EQ(p.calls[1].name, "get_temperature_date");
  EXPECT_EQ(json::parse(p.calls[1].arguments)["date"], "2024-10-01");
  EXPECT_EQ(p.content, "");
  // content before a call; arguments given before the name; arguments as a JSON string
  const Parsed q = parse_all_ways(ToolParserKind::kHermes,
                                  "Let me check.\n<tool_call>\n{\"arguments\": {\"q\": [1, {\"x\": \"}\"}]}, \"name\": "
                                  "\"search\"}\n</tool_call><tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}"
                                  "</tool_call>");
  EXPECT_EQ(q.content, "Let me check.\n");
  ASSERT_EQ(q.calls.size(), 2u);
  EXPECT_EQ(q.calls[0], (Call{"search", R"({"q": [1, {"x": "}"}]})"}));
  EXPECT_EQ(q.calls[1], (Call{"f", R"({"a":1})"}));
  // no arguments: {}
  EXPECT_EQ(parse_all_ways(ToolParserKind::kHermes, "<tool_call>{\"name\": \"now\"}</tool_call>").calls,
            (std::vector<Call>{{"now", "{}"}}));
}

TEST(ToolParser, MalformedBlocksAreContent) {
  // not JSON, no name, cut before the name: the text comes back as it was
  for (const char* t : {"<tool_call>\nnot json\n</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                        "a <tool_call>{\"nam", "x <tool_call"}) {
    const Parsed p = parse_all_ways(ToolParserKind::kHermes, t);
    EXPECT_TRUE(p.calls.empty()) << t;
    EXPECT_EQ(p.content, t);
  }
  // cut after the name (max_tokens): the call stays, with what the arguments had
  const Parsed cut = parse_all_ways(ToolParserKind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1");
  EXPECT_EQ(cut.calls, (std::vector<Call>{{"f", "{\"a\": 1"}}));
  // plain text without markers, text that resembles them
  EXPECT_EQ(parse_all_ways(ToolParserKind::kHermes, "a < b <tool and <tool_cal").content, "a < b <tool and <tool_cal");
}

TEST(ToolParser, Llama3Json) {
  const Parsed p = parse_all_ways(ToolParserKind::kLlama3Json,
                                  "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San "
                                  "Francisco, CA\", \"unit\": \"Fahrenheit\"}}");
  EXPECT_EQ(p.calls, (std::vector<Call>{{"get_current_conditions",
                                         R"({"location": "San Francisco, CA", "unit": "Fahrenheit"})"}}));
  EXPECT_EQ(p.content, "");
  const Parsed two = parse_all_ways(ToolParserKind::kLlama3Json,
                                    "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                                    "\"parameters\": {\"x\": null}}");
  EXPECT_EQ(two.calls, (std::vector<Call>{{"a", "{}"}, {"b", R"({"x": null})"}}));
  // an answer that is text, or JSON without a name
  EXPECT_EQ(parse_all_ways(ToolParserKind::kLlama3Json, "  The weather is fine.").content, "  The weather is fine.");
  const Parsed obj = parse_all_ways(ToolParserKind::kLlama3Json, "{\"answer\": 42}");
  EXPECT_TRUE(obj.calls.empty());
  EXPECT_EQ(obj.content, "{\"answer\": 42}");
}

TEST(ToolParser, Mistral) {
  const Parsed p = parse_all_ways(ToolParserKind::kMistral,
                                  "[TOOL_CALLS][{\"name\": \"retrieve_payment_status\", \"arguments\": "
                                  "{\"transaction_id\": \"T1001\"}}, {\"name\": \"retrieve_payment_date\", "
                                  "\"arguments\": {\"transaction_id\": \"T1001\"}}]");
  EXPECT_EQ(p.calls, (std::vector<Call>{{"retrieve_payment_status", R"({"transaction_id": "T1001"})"},
                                        {"retrieve_payment_date", R"({"transaction_id": "T1001"})"}}));
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(parse_all_ways(ToolParserKind::kMistral, "[TOOL_CALLS] oops").content, "[TOOL_CALLS] oops");
}

TEST(ToolParser, DeepSeekV3) {
  using namespace markers;
  const std::string text = std::string("I will look it up.") + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                           "get_weather\n```json\n{\"location\": \"Tokyo\"}\n```" + kDsCallEnd + "\n" +
                           kDsCallBegin + "function" + kDsSep + "get_time\n```json\n{}\n```" + kDsCallEnd +
                           kDsCallsEnd;
  const Parsed p = parse_all_ways(ToolParserKind::kDeepSeekV3, text);
  EXPECT_EQ(p.content, "I will look it up.");
  EXPECT_EQ(p.calls, (std::vector<Call>{{"get_weather", R"({"location": "Tokyo"})"}, {"get_time", "{}"}}));
}

// A long call streamed in small pieces: each piece resumes the scan of the call object where the last one stopped
// (the whole object was scanned again per piece, quadratic: 400 KB of arguments took ~10 s; found by
// fuzz/model_output_fuzz.cpp). Pieces of 3 bytes cut keys, strings and escapes anywhere.
TEST(ToolParser, LongCallStreamedInSmallPiecesIsScannedOnce) {
  const std::string value(200000, 'x');
  const std::string args = "{\"q\": \"a\\\"b\", \"v\": [\"" + value + "\", {\"n\": 1}]}";
  for (ToolParserKind k : {ToolParserKind::kHermes, ToolParserKind::kLlama3Json, ToolParserKind::kMistral}) {
    const std::string call = std::string("{\"name\": \"f\", \"") +
                             (k == ToolParserKind::kLlama3Json ? "parameters" : "arguments") + "\": " + args + "}";
    const std::string text = k == ToolParserKind::kHermes ? "<tool_call>\n" + call + "\n</tool_call>"
                             : k == ToolParserKind::kMistral ? "[TOOL_CALLS][" + call + "]" : call;
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size(); i += 3) pieces.push_back(text.substr(i, 3));
    const Parsed p = parse(k, pieces);
    EXPECT_EQ(p.content, "") << tool_parser_name(k);
    ASSERT_EQ(p.calls.size(), 1u) << tool_parser_name(k);
    EXPECT_EQ(p.calls[0].name, "f");
    EXPECT_TRUE(p.calls[0].arguments == args) << tool_parser_name(k);
  }
}

TEST(ToolParser, NoneIsText) {
  EXPECT_EQ(parse(ToolParserKind::kNone, {"<tool_call>{\"name\": \"f\"}</tool_call>"}).content,
            "<tool_call>{\"name\": \"f\"}</tool_call>");
}

TEST(ToolParser, RandomPiecesAgreeWithWhole) {
  const std::string text = "Sure.<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"<tool_call>\\\"}\", \"n\": "
                           "[1,2]}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": 7}</tool_call> done";
  const Parsed whole = parse(ToolParserKind::kHermes, {text});
  EXPECT_EQ(whole.calls, (std::vector<Call>{{"a", R"({"s": "<tool_call>\"}", "n": [1,2]})"}, {"b", "7"}}));
  EXPECT_EQ(whole.content, "Sure.\n done");  // text between and after the calls, kept as it was
  Xoshiro256 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng.next() % 7;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    const Parsed p = parse(ToolParserKind::kHermes, pieces);
    EXPECT_EQ(p.content, whole.content);
    EXPECT_EQ(p.calls, whole.calls);
  }
}

// Hostile outputs (a model may write anything): random edits of each family's example texts, with its markers
// among the characters inserted, parse without a crash (ASan / UBSan in CI), and the calls and content are the same
// whether the text arrives whole or in random pieces (what a streaming client sees equals the whole response).
TEST(ToolParser, MutatedOutputsStreamAsWhole) {
  using namespace markers;
  struct Family {
    ToolParserKind kind;
    std::string text;
  };
  const Family families[] = {
      {ToolParserKind::kHermes, "Ok.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>"
                                "<tool_call>{\"name\":\"g\",\"arguments\":\"{}\"}</tool_call> end"},
      {ToolParserKind::kLlama3Json, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [true]}}; "
                                    "{\"name\": \"b\", \"parameters\": {}}"},
      {ToolParserKind::kMistral, "Hm [TOOL_CALLS][{\"name\": \"p\", \"arguments\": {\"id\": \"T1\"}}, "
                                 "{\"name\": \"q\", \"arguments\": {}}]"},
      {ToolParserKind::kDeepSeekV3, std::string("Look.") + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                                        "w\n```json\n{\"l\": \"T\"}\n```" + kDsCallEnd + kDsCallsEnd + " ok"}};
  Xoshiro256 rng(4242);
  auto rnd = [&](size_t n) { return static_cast<size_t>(rng.next() % n); };
  int with_calls = 0;
  for (const Family& f : families) {
    std::vector<std::string> inserts = tool_parser_markers(f.kind);
    for (const char* x : {"{", "}", "\"", "[", "]", ",", ":", "\\", "\n", "name", "\xc3", "\xe2\x80"}) inserts.push_back(x);
    for (int iter = 0; iter < 1500; ++iter) {
      std::string t = f.text;
      const int edits = 1 + static_cast<int>(rnd(3));
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const size_t pos = rnd(t.size());
        if (rnd(2)) t.erase(pos, 1 + rnd(6));
        else t.insert(pos, inserts[rnd(inserts.size())]);
      }
      const Parsed whole = parse(f.kind, {t});
      with_calls += !whole.calls.empty();
      std::vector<std::string> pieces;
      for (size_t i = 0; i < t.size();) {
        const size_t n = 1 + rnd(5);
        pieces.push_back(t.substr(i, n));
        i += n;
      }
      const Parsed streamed = parse(f.kind, pieces);
      EXPECT_EQ(streamed.content, whole.content) << tool_parser_name(f.kind) << ": " << t;
      EXPECT_EQ(streamed.calls, whole.calls) << tool_parser_name(f.kind) << ": " << t;
    }
  }
  EXPECT_GT(with_calls, 1500);  // many edits keep some call intact
}

std::pair<std::string, std::string> think(ReasoningKind k, bool open, const std::vector<std::string>& pieces) {
  ReasoningParser p(k, open);
  std::string r, c;
  for (const auto& s : pieces) {
    ReasoningDelta d = p.feed(s);
    r += d.reasoning;
    c += d.content;
  }
  ReasoningDelta d = p.finish();
  return {r + d.reasoning, c + d.content};
}

TEST(Reasoning, SplitsThinkBlocksFedInAnyPieces) {
  struct Case {
    ReasoningKind kind;
    bool prompt_open;
    std::string text, reasoning, content;
  };
  const Case cases[] = {
      {ReasoningKind::kQwen3, false, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "\nLet me think.\n",
       "\n\nThe answer is 4."},
      {ReasoningKind::kQwen3, false, "The answer is 4.", "", "The answer is 4."},
      {ReasoningKind::kQwen3, false, "  <thin> no", "", "  <thin> no"},
      {ReasoningKind::kQwen3, true, "still thinking</think>done", "still thinking", "done"},
      {ReasoningKind::kQwen3, false, "<think>cut off", "cut off", ""},
      {ReasoningKind::kDeepSeekR1, false, "Okay, so 2+2.</think>4", "Okay, so 2+2.", "4"},
      {ReasoningKind::kDeepSeekR1, false, "<think>hmm</think>4", "hmm", "4"},
      {ReasoningKind::kDeepSeekR1, false, "no end tag", "no end tag", ""},
      {ReasoningKind::kNone, false, "<think>x</think>y", "", "<think>x</think>y"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(think(c.kind, c.prompt_open, {c.text}), std::make_pair(c.reasoning, c.content)) << c.text;
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    EXPECT_EQ(think(c.kind, c.prompt_open, bytes), std::make_pair(c.reasoning, c.content)) << c.text;
    for (size_t cut = 0; cut <= c.text.size(); ++cut)
      EXPECT_EQ(think(c.kind, c.prompt_open, {c.text.substr(0, cut), c.text.substr(cut)}),
                std::make_pair(c.reasoning, c.content))
          << c.text << " cut " << cut;
  }
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("no tags"));
}

// Random edits of think blocks (tags inserted, removed or cut): reasoning and content are the same whether the text
// arrives whole or in random pieces.
TEST(Reasoning, MutatedOutputsStreamAsWhole) {
  const std::string bases[] = {"<think>\nLet me think.\n</think>\n\nThe answer is 4.", "Okay, 2+2.</think>4 <think>x",
                               "a <thin> b </think> c"};
  const std::string inserts[] = {"<think>", "</think>", "<", "</", "think>", "\n", "\xe2\x80"};
  Xoshiro256 rng(77);
  auto rnd = [&](size_t n) { return static_cast<size_t>(rng.next() % n); };
  for (ReasoningKind k : {ReasoningKind::kQwen3, ReasoningKind::kDeepSeekR1})
    for (bool open : {false, true})
      for (int iter = 0; iter < 500; ++iter) {
        std::string t = bases[rnd(std::size(bases))];
        for (int e = 1 + static_cast<int>(rnd(3)); e > 0 && !t.empty(); --e) {
          const size_t pos = rnd(t.size());
          if (rnd(2)) t.erase(pos, 1 + rnd(5));
          else t.insert(pos, inserts[rnd(std::size(inserts))]);
        }
        std::vector<std::string> pieces;
        for (size_t i = 0; i < t.size();) {
          const size_t n = 1 + rnd(4);
          pieces.push_back(t.substr(i, n));
          i += n;
        }
        EXPECT_EQ(think(k, open, pieces), think(k, open, {t})) << reasoning_parser_name(k) << " " << open << ": " << t;
      }
}

}  // namespace
}  // namespace mopt::server
