// The model card the web console shows (GET /model_card): what is served and how. Facts only, read from the loaded
// model and the engine's resolved settings; the device description comes from the caller (the CLI asks doctor).
#pragma once

#include "engine/engine.h"
#include "model/model.h"
#include "server/openai.h"

namespace mopt::server {

// {"name", "path", "format", "architecture", "parameters", "weights": {dtype: {"tensors", "bytes"}},
//  "context": {"trained", "max_model_len"}, "hyperparameters": {...}, "tokenizer": {...},
//  "engine": {resolved EngineConfig, KV pool size}, "device": `device`}
json model_card(const Model& model, const EngineConfig& config, const EngineStats& stats, const json& device);

}  // namespace mopt::server
