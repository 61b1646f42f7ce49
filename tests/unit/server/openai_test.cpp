// OpenAI request parsing/validation, UTF-8 checks, constant-time compare and the Prometheus rendering.
#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai.h"

namespace mopt::server {
namespace {

std::variant<GenerateRequest, ApiError> parse(const std::string& body, bool chat = false) {
  auto j = parse_json_body(body, 64);
  if (auto* e = std::get_if<ApiError>(&j)) return *e;
  return parse_generate_request(std::get<json>(j), chat, ApiLimits{});
}

TEST(OpenAI, ParsesACompletionRequest) {
  auto r = parse(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":-1,
                    "min_p":0.1,"seed":-3,"stop":["a","b"],"n":2,"logprobs":3,"stream":true,
                    "stream_options":{"include_usage":true},"presence_penalty":-2,"frequency_penalty":2})");
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r)) << std::get<ApiError>(r).message;
  const auto& g = std::get<GenerateRequest>(r);
  EXPECT_EQ(g.model, "m");
  ASSERT_EQ(g.prompts.size(), 1u);
  EXPECT_EQ(g.prompts[0].text, "hi");
  EXPECT_EQ(g.params.max_tokens, 7);
  EXPECT_TRUE(g.max_tokens_given);
  EXPECT_FLOAT_EQ(g.params.temperature, 0.5f);
  EXPECT_EQ(g.params.top_k, 0);  // -1 = off
  EXPECT_EQ(*g.params.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(g.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.logprobs, 3);
  EXPECT_EQ(g.params.logprobs, 3);
  EXPECT_TRUE(g.stream && g.include_usage);
}

TEST(OpenAI, PromptForms) {
  auto ids = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":[1,2,3]})"));
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_TRUE(ids.prompts[0].is_tokens);
  EXPECT_EQ(ids.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto many = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":["a",[4,5]]})"));
  ASSERT_EQ(many.prompts.size(), 2u);
  EXPECT_FALSE(many.prompts[0].is_tokens);
  EXPECT_TRUE(many.prompts[1].is_tokens);
  EXPECT_FALSE(many.max_tokens_given);
  EXPECT_EQ(many.params.max_tokens, 16);
}

TEST(OpenAI, EchoWithLogprobsScoresThePrompt) {
  // lm-evaluation-harness's log-likelihood request: the prompt's logprobs, nothing generated.
  auto s = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":[1,2,3],"echo":true,"logprobs":2,
                                              "max_tokens":0})"));
  EXPECT_TRUE(s.score_only);
  EXPECT_EQ(s.params.prompt_logprobs, 2);
  EXPECT_EQ(s.params.logprobs, 2);
  EXPECT_EQ(s.params.max_tokens, 1);  // one token is sampled from the last prompt row and dropped
  auto g = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":"x","echo":true,"logprobs":0,"max_tokens":4})"));
  EXPECT_FALSE(g.score_only);
  EXPECT_EQ(g.params.prompt_logprobs, 0);
  EXPECT_EQ(g.params.max_tokens, 4);
  auto plain = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":"x","logprobs":1})"));
  EXPECT_EQ(plain.params.prompt_logprobs, -1);  // no echo: the prompt is not scored
}

TEST(OpenAI, ContinuousUsageAndStopStringFlag) {
  auto g = std::get<GenerateRequest>(parse(R"({"model":"m","prompt":"x","stream":true,"include_stop_str_in_output":
      false,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})"));
  EXPECT_TRUE(g.include_usage && g.continuous_usage);
}

TEST(OpenAI, ChatMessagesAndContentParts) {
  auto r = parse(R"({"model":"m","messages":[{"role":"system","content":"s"},
                    {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                    {"role":"assistant","content":null}],"max_completion_tokens":3,"max_tokens":9,
                    "logprobs":true,"top_logprobs":2,"chat_template_kwargs":{"enable_thinking":false}})", true);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r)) << std::get<ApiError>(r).message;
  const auto& g = std::get<GenerateRequest>(r);
  ASSERT_TRUE(g.messages.is_list());
  ASSERT_EQ(g.messages.list().size(), 3u);
  EXPECT_EQ(g.messages.list()[1].find("content")->str(), "a\nb");
  EXPECT_TRUE(g.messages.list()[2].find("content")->is_none());
  EXPECT_EQ(g.params.max_tokens, 3);  // max_completion_tokens wins
  EXPECT_EQ(g.logprobs, 2);
  EXPECT_FALSE(g.template_kwargs.find("enable_thinking")->truthy());
}

TEST(OpenAI, RejectsBadInputWithParamAndCode) {
  struct Case {
    const char* body;
    bool chat;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"({"prompt":"x"})", false, "model", ""},
      {R"({"model":1,"prompt":"x"})", false, "model", ""},
      {R"({"model":"m"})", false, "prompt", ""},
      {R"({"model":"m","prompt":{}})", false, "prompt", ""},
      {R"({"model":"m","prompt":[]})", false, "prompt", ""},
      {R"({"model":"m","prompt":[1,"a"]})", false, "prompt", ""},
      {R"({"model":"m","prompt":[-1]})", false, "prompt", "invalid_token_id"},
      {R"({"model":"m","prompt":[3000000000]})", false, "prompt", "invalid_token_id"},
      {R"({"model":"m","prompt":"x","temperature":2.5})", false, "temperature", ""},
      {R"({"model":"m","prompt":"x","temperature":"1"})", false, "temperature", ""},
      {R"({"model":"m","prompt":"x","top_p":0})", false, "top_p", ""},
      {R"({"model":"m","prompt":"x","top_k":-2})", false, "top_k", ""},
      {R"({"model":"m","prompt":"x","max_tokens":0})", false, "max_tokens", ""},
      {R"({"model":"m","prompt":"x","max_tokens":1.5})", false, "max_tokens", ""},
      {R"({"model":"m","prompt":"x","max_tokens":18446744073709551615})", false, "max_tokens", ""},
      {R"({"model":"m","prompt":"x","n":17})", false, "n", ""},
      {R"({"model":"m","prompt":"x","best_of":3})", false, "best_of", ""},
      {R"({"model":"m","prompt":"x","stop":5})", false, "stop", ""},
      {R"({"model":"m","prompt":"x","stop":[""]})", false, "stop", ""},
      {R"({"model":"m","prompt":"x","logprobs":true})", false, "logprobs", ""},
      {R"({"model":"m","prompt":"x","logprobs":21})", false, "logprobs", ""},
      {R"({"model":"m","prompt":"x","max_tokens":0,"echo":false})", false, "max_tokens", ""},
      {R"({"model":"m","prompt":"x","foo":1})", false, "foo", "unsupported_field"},
      {R"({"model":"m","prompt":"x","messages":[]})", false, "messages", "unsupported_field"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"echo":true})", true, "echo", "unsupported_field"},
      {R"({"model":"m","prompt":"x","include_stop_str_in_output":true})", false, "include_stop_str_in_output", ""},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true}})", false,
       "stream_options", ""},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true,"x":1}})", false,
       "stream_options", ""},
      {R"({"model":"m","prompt":"x","max_tokens":-1,"echo":true})", false, "max_tokens", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":0})", true, "max_tokens", ""},
      {R"({"model":"m","prompt":"x","max_tokens":0,"echo":true,"guided_regex":"a"})", false, "guided_regex", ""},
      {R"({"model":"m","prompt":"x","max_tokens":0,"echo":true,"min_tokens":1})", false, "min_tokens", ""},
      {R"({"model":"m","prompt":"x","suffix":"s"})", false, "suffix", ""},
      {R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", false, "stream_options", ""},
      {R"({"model":"m","prompt":"x","min_tokens":5,"max_tokens":2})", false, "min_tokens", ""},
      {R"({"model":"m","messages":{}})", true, "messages", ""},
      {R"({"model":"m","messages":[{"role":"user"}]})", true, "messages[0].content", ""},
      {R"({"model":"m","messages":[{"role":"x","content":"a"}]})", true, "messages[0].role", ""},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true,
       "messages[0].content", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"top_logprobs":1})", true, "top_logprobs", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"response_format":{"type":"xml"}})", true,
       "response_format", ""},
      // structured output and tools
      {R"({"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":
          {"type":"object","patternProperties":{}}}}})", false, "response_format.json_schema.schema",
       "invalid_schema"},
      {R"({"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"x"}}})", false,
       "response_format", ""},
      {R"({"model":"m","prompt":"x","guided_json":"{not json"})", false, "guided_json", "invalid_schema"},
      {R"j({"model":"m","prompt":"x","guided_regex":"a(?=b)"})j", false, "guided_regex", "invalid_regex"},
      {R"({"model":"m","prompt":"x","guided_choice":[]})", false, "guided_choice", ""},
      {R"({"model":"m","prompt":"x","guided_choice":["a"],"guided_regex":"b"})", false, "guided_choice", ""},
      {R"({"model":"m","prompt":"x","guided_decoding_backend":"outlines"})", false, "guided_decoding_backend", ""},
      {R"({"model":"m","prompt":"x","grammar":5})", false, "grammar", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"code"}]})", true,
       "tools[0].type", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":
          {"name":"bad name"}}]})", true, "tools[0].function.name", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":
          {"name":"f","parameters":[]}}]})", true, "tools[0].function.parameters", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":
          {"name":"f"}},{"type":"function","function":{"name":"f"}}]})", true, "tools[1].function.name", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":
          {"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})", true, "tool_choice", ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tool_choice":"required"})", true, "tool_choice",
       ""},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":
          {"name":"f"}}],"tool_choice":"required","guided_regex":"a"})", true, "tool_choice", ""},
  };
  for (const auto& c : cases) {
    auto r = parse(c.body, c.chat);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c.body;
    const auto& e = std::get<ApiError>(r);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAI, JsonBodyLimits) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_json_body("", 64)));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_json_body("[1]", 64)));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_json_body("{\"a\":1", 64)));
  std::string deep = "{\"a\":" + std::string(65, '[') + std::string(65, ']') + "}";
  auto r = parse_json_body(deep, 64);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_NE(std::get<ApiError>(r).message.find("nested deeper"), std::string::npos);
  std::string ok = "{\"a\":" + std::string(10, '[') + std::string(10, ']') + "}";
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_body(ok, 64)));
  auto bad = parse_json_body("{\"a\":\"\xff\"}", 64);
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).code, "invalid_utf8");
}

TEST(OpenAI, ErrorBodyShape) {
  ApiError e = bad_request("bad \xff thing", "temperature", "");
  auto j = json::parse(error_body(e));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_NE(j["error"]["message"].get<std::string>().find("bad"), std::string::npos);
  auto j5 = json::parse(error_body(503, "busy", "server_busy"));
  EXPECT_EQ(j5["error"]["type"], "service_unavailable");
}

TEST(Utf8, ValidAndInvalidSequences) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xc3"));              // truncated
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x28\xa1"));      // bad continuation
}

TEST(Http, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render("x", "help", out);
  EXPECT_NE(out.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;  // the shortest text, not 0.1000...01
  EXPECT_NE(out.find("x_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count 4\n"), std::string::npos);
  EXPECT_NE(out.find("x_sum 8.05\n"), std::string::npos) << out;
}

TEST(Metrics, RenderHasTheRequiredFamilies) {
  ServerMetrics m;
  m.count_finish(FinishReason::kStop);
  m.count_finish(FinishReason::kLength);
  m.count_finish(FinishReason::kLength);
  EngineStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_usage = 0.25;
  s.prefix_cache_hits = 7;
  s.runner.cuda_graphs = 2;
  EngineConfig cfg;
  cfg.block_size = 32;
  cfg.runner.device = DeviceKind::kCpu;
  cfg.enable_prefix_caching = false;
  cfg.speculative.method = SpecMethod::kNgram;
  cfg.speculative.num_speculative_tokens = 4;
  s.spec_num_drafts = 4;
  s.spec_num_draft_tokens = 16;
  s.spec_num_accepted_tokens = 6;
  std::string out = m.render(s, &cfg, {false, "m"});
  EXPECT_NE(out.find("mopt:engine_config_info{model_name=\"m\",device=\"cpu\",block_size=\"32\",max_num_seqs=\"256\","
                     "max_num_batched_tokens=\"2048\",max_model_len=\"0\",num_blocks=\"0\","
                     "kv_cache_dtype=\"auto\",prefix_caching=\"false\",enforce_eager=\"false\","
                     "speculative_method=\"ngram\",num_speculative_tokens=\"4\"} 1\n"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("mopt:device_memory_used_bytes"), std::string::npos) << "no device: no device memory line";
  EXPECT_EQ(m.render(s, nullptr).find("mopt:engine_config_info{"), std::string::npos) << "no settings while loading";
  for (const char* needle :
       {"mopt:num_requests_running{model_name=\"m\"} 3\n", "mopt:num_requests_waiting{model_name=\"m\"} 2\n",
        "mopt:num_requests_swapped{model_name=\"m\"} 0\n", "mopt:kv_cache_usage_perc{model_name=\"m\"} 0.25\n",
        "mopt:prefix_cache_hits_total{model_name=\"m\"} 7\n", "mopt:prefix_cache_queries_total{model_name=\"m\"} 0\n",
        "mopt:prompt_tokens_total{model_name=\"m\"} 0\n", "mopt:generation_tokens_total{model_name=\"m\"} 0\n",
        "mopt:num_preemptions_total{model_name=\"m\"} 0\n",
        "mopt:request_success_total{model_name=\"m\",finished_reason=\"length\"} 2\n",
        "mopt:model_loaded{model_name=\"m\"} 1\n", "mopt:cuda_graphs_enabled{model_name=\"m\"} 0\n",
        "mopt:cuda_graphs_captured{model_name=\"m\"} 2\n", "mopt:cuda_graph_launches_total{model_name=\"m\"} 0\n",
        "mopt:spec_decode_num_drafts_total{model_name=\"m\"} 4\n",
        "mopt:spec_decode_num_draft_tokens_total{model_name=\"m\"} 16\n",
        "mopt:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 6\n",
        "mopt:spec_decode_mean_acceptance_length{model_name=\"m\"} 2.5\n",
        "# TYPE mopt:time_to_first_token_seconds histogram\n", "# TYPE mopt:inter_token_latency_seconds histogram\n",
        "# TYPE mopt:e2e_request_latency_seconds histogram\n", "# TYPE mopt:request_queue_time_seconds histogram\n"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle;
  EXPECT_EQ(out.find("vllm:"), std::string::npos) << "vLLM's series only with --metrics-compat vllm";
  // Every sample carries the model_name label, as vLLM's series do (dashboards filter on it).
  s.runner.device_memory_used = 1024;
  std::istringstream lines(m.render(s, &cfg, {false, "m"}));
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_EQ(line.find("mopt:"), 0u) << line;
    EXPECT_NE(line.find("{model_name=\"m\""), std::string::npos) << line;
  }
  EXPECT_GT(samples, 100);
}

TEST(Metrics, TokenAndIterationHistograms) {
  ServerMetrics m;
  RequestOutput o;
  o.finish_reason = FinishReason::kStop;
  o.prompt_tokens = 7;
  o.completion_tokens = 30;
  m.finish_request(o);
  EngineStats s;
  s.steps = 3;
  s.step_tokens_counts[0] = 1;  // one step of 1 token, two of 9..16 tokens
  s.step_tokens_counts[2] = 2;
  s.step_tokens_sum = 1 + 12 + 16;
  const EngineConfig cfg;
  const std::string out = m.render(s, &cfg, {false, "m"});
  for (const char* needle :
       {"mopt:request_prompt_tokens_bucket{model_name=\"m\",le=\"5\"} 0\n",
        "mopt:request_prompt_tokens_bucket{model_name=\"m\",le=\"10\"} 1\n",
        "mopt:request_prompt_tokens_sum{model_name=\"m\"} 7\n",
        "mopt:request_generation_tokens_bucket{model_name=\"m\",le=\"20\"} 0\n",
        "mopt:request_generation_tokens_bucket{model_name=\"m\",le=\"50\"} 1\n",
        "mopt:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 1\n",
        "mopt:iteration_tokens_total_bucket{model_name=\"m\",le=\"1\"} 1\n",
        "mopt:iteration_tokens_total_bucket{model_name=\"m\",le=\"8\"} 1\n",
        "mopt:iteration_tokens_total_bucket{model_name=\"m\",le=\"16\"} 3\n",
        "mopt:iteration_tokens_total_bucket{model_name=\"m\",le=\"+Inf\"} 3\n",
        "mopt:iteration_tokens_total_sum{model_name=\"m\"} 29\n",
        "mopt:iteration_tokens_total_count{model_name=\"m\"} 3\n"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle << "\n" << out;
}

TEST(Metrics, VllmNamesWithModelNameLabel) {
  ServerMetrics m;
  m.count_finish(FinishReason::kLength);
  m.ttft.observe(0.003);
  EngineStats s;
  s.running = 2;
  s.kv_usage = 0.5;
  s.generation_tokens = 11;
  const EngineConfig cfg;
  const std::string out = m.render(s, &cfg, {true, "my \"model\""});
  const std::string l = "model_name=\"my \\\"model\\\"\"";  // the quotes escaped
  for (const std::string& needle : std::vector<std::string>{
           "vllm:num_requests_running{" + l + "} 2\n", "vllm:num_requests_waiting{" + l + "} 0\n",
        "vllm:kv_cache_usage_perc{" + l + "} 0.5\n", "vllm:gpu_cache_usage_perc{" + l + "} 0.5\n",
        "vllm:generation_tokens_total{" + l + "} 11\n", "# TYPE vllm:generation_tokens_total counter\n",
        "vllm:request_success_total{" + l + ",finished_reason=\"length\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.0025\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.005\"} 1\n",
        "vllm:time_to_first_token_seconds_count{" + l + "} 1\n", "# TYPE vllm:time_per_output_token_seconds histogram\n",
        "# TYPE vllm:inter_token_latency_seconds histogram\n", "# TYPE vllm:e2e_request_latency_seconds histogram\n",
        "# TYPE vllm:request_queue_time_seconds histogram\n", "# TYPE vllm:request_prompt_tokens histogram\n",
        "# TYPE vllm:request_generation_tokens histogram\n", "# TYPE vllm:iteration_tokens_total histogram\n",
        "vllm:prefix_cache_hits_total{" + l + "} 0\n", "vllm:num_preemptions_total{" + l + "} 0\n",
        "vllm:spec_decode_num_accepted_tokens_total{" + l + "} 0\n",
        "mopt:num_requests_running{" + l + "} 2\n"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle << "\n" << out;
  // Each family has one HELP/TYPE header: no name is written twice.
  std::vector<std::string> types;
  for (size_t at = out.find("# TYPE "); at != std::string::npos; at = out.find("# TYPE ", at + 1))
    types.push_back(out.substr(at + 7, out.find(' ', at + 7) - at - 7));
  std::sort(types.begin(), types.end());
  EXPECT_EQ(std::adjacent_find(types.begin(), types.end()), types.end());
  EXPECT_EQ(metric_number(0.0025), "0.0025");
  EXPECT_EQ(metric_number(640), "640");
  EXPECT_EQ(metric_number(1.0 / 3), "0.3333333333333333");
}


// Hostile bodies: random byte mutations of valid requests give a value or a 400, never a crash (ASan in CI).
TEST(OpenAI, MutatedBodiesNeverCrash) {
  const std::string bases[] = {
      R"({"model":"m","prompt":["a",[1,2]],"max_tokens":7,"stop":["x"],"n":2,"logprobs":2,"stream":true,)"
      R"("stream_options":{"include_usage":true},"seed":5,"top_k":3})",
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},)"
      R"({"role":"assistant","content":null}],"logprobs":true,"top_logprobs":2,"tools":[{"a":[1,{"b":null}]}]})"};
  const char alphabet[] = "{}[]\",:0123456789-.eEtrufalsn\\u\xff\xc3 ";
  Xoshiro256 rng(88172645463325252ull);
  auto rnd = [&](uint64_t n) { return rng.next() % n; };
  int ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string b = bases[rnd(2)];
    int edits = 1 + static_cast<int>(rnd(3));
    for (int e = 0; e < edits && !b.empty(); ++e) {
      size_t pos = rnd(b.size());
      if (rnd(2)) b[pos] = alphabet[rnd(sizeof alphabet - 1)];
      else b.erase(pos, 1 + rnd(4));
    }
    auto r = parse(b, b.find("messages") != std::string::npos);
    if (std::holds_alternative<GenerateRequest>(r)) ++ok;
    else EXPECT_EQ(std::get<ApiError>(r).status, 400);
  }
  EXPECT_GT(ok, 10);
}

}  // namespace
}  // namespace mopt::server
