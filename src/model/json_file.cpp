#include "model/json_file.h"

namespace mopt {

Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return error("%s: not valid JSON (%s); re-download or re-save the file", name.c_str(), e.what());
  }
  if (!j.is_object()) return error("%s: not a JSON object (the file must hold one {...} at the top level)", name.c_str());
  return j;
}

}  // namespace mopt
