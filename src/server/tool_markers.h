// The marker texts of the tool-call formats (shared by the forcing grammars and the parser).
#pragma once

namespace mopt::server::markers {

inline constexpr const char* kHermesOpen = "<tool_call>";  // Qwen2.5 / Qwen3 / Hermes
inline constexpr const char* kHermesClose = "</tool_call>";
inline constexpr const char* kPythonTag = "<|python_tag|>";  // Llama 3.x
inline constexpr const char* kMistralCalls = "[TOOL_CALLS]";
// DeepSeek V3 / R1 (U+FF5C fullwidth vertical line, U+2581 lower one eighth block).
inline constexpr const char* kDsCallsBegin = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>";
inline constexpr const char* kDsCallBegin = "<\uFF5Ctool\u2581call\u2581begin\uFF5C>";
inline constexpr const char* kDsSep = "<\uFF5Ctool\u2581sep\uFF5C>";
inline constexpr const char* kDsCallEnd = "<\uFF5Ctool\u2581call\u2581end\uFF5C>";
inline constexpr const char* kDsCallsEnd = "<\uFF5Ctool\u2581calls\u2581end\uFF5C>";

}  // namespace mopt::server::markers
