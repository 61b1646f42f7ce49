// The JSON files of a model folder (config.json, tokenizer.json, tokenizer_config.json, *.safetensors.index.json,
// ...): parsed from untrusted text, with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mopt {

// `text` as JSON whose top level is an object. Errors start with `name`: "<dir>/config.json: not valid JSON (...)".
Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& name);

}  // namespace mopt
