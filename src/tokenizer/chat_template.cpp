#include "tokenizer/chat_template.h"

#include <exception>

#include "tokenizer/jinja_ast.h"

namespace mopt {

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

Result<ChatTemplate> ChatTemplate::compile(const std::string& source, const TemplateLimits& limits) {
  ChatTemplate t;
  t.source_ = source;
  t.limits_ = limits;
  jinja::ParseLimits pl;
  pl.max_source_bytes = limits.max_source_bytes;
  try {
    t.root_ = jinja::parse(source, pl);
  } catch (const jinja::Error& e) {
    return Status::error(std::string("chat template syntax error: ") + e.what());
  } catch (const std::exception& e) {
    return Status::error(std::string("chat template could not be parsed: ") + e.what());
  }
  return t;
}

Result<std::string> ChatTemplate::render(const jinja::Value& context) const {
  if (!root_) return Status::error("chat template is empty (not compiled)");
  try {
    return jinja::evaluate(*root_, context, limits_);
  } catch (const jinja::Error& e) {
    return Status::error(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::error("chat template: out of memory while rendering");
  } catch (const std::length_error& e) {
    return Status::error(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return Status::error(std::string("chat template: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render_chat(const jinja::Value& messages, bool add_generation_prompt,
                                              const std::string& bos_token, const std::string& eos_token,
                                              const jinja::Value& extra) const {
  jinja::Value ctx{jinja::Dict{}};
  if (extra.is_dict())
    for (const auto& [k, v] : extra.dict()) ctx.set(k, v);
  ctx.set("messages", messages);
  ctx.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  ctx.set("bos_token", jinja::Value(bos_token));
  ctx.set("eos_token", jinja::Value(eos_token));
  return render(ctx);
}

}  // namespace mopt
