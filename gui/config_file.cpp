#include "gui/config_file.hpp"

#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"
#include "sim/core/file_io.hpp"
#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/model/model_io.hpp"

namespace zerolens::gui {
namespace {

using nlohmann::json;
using namespace json_read;

bool is_cluster_preset(const std::string& name) {
  for (const auto& preset : cluster_preset_names()) {
    if (preset == name) return true;
  }
  return false;
}

json model_json(const Settings& s) {
  if (s.model.source == "preset" || s.model.source == "dense") return s.model_source;
  return model_to_json(s.model);
}

void read_model(const json& value, Settings& s, Diagnostics& diagnostics) {
  if (value.is_string()) {
    load_model_spec(s, value.get<std::string>(), diagnostics);
    return;
  }
  s.model = model_from_layers_json(as_object(value, "model"), diagnostics, "model");
  s.model_source = s.model.name;
}

void read_cluster(const json& value, Settings& s, Diagnostics& diagnostics) {
  if (value.is_string()) {
    load_cluster_spec(s, value.get<std::string>(), diagnostics);
    return;
  }
  s.cluster = cluster_from_json(as_object(value, "cluster"), diagnostics);
  s.cluster_source = s.cluster.name;
}

const json& required(const json& object, const char* key) {
  const json* value = member(object, key);
  if (!value) throw InputError(key, "missing");
  return *value;
}

Settings read_gui_config(const json& document, Diagnostics& diagnostics) {
  if (as_int(required(document, "version"), "version") != kConfigFileVersion) {
    throw InputError("version",
                     "unsupported version (expected " + std::to_string(kConfigFileVersion) + ")");
  }
  warn_unknown_keys(
      document,
      {"schema", "version", "model", "cluster", "gpus", "gpus_per_node", "seq_len", "deepspeed"},
      "", diagnostics);
  Settings s;
  read_model(required(document, "model"), s, diagnostics);
  read_cluster(required(document, "cluster"), s, diagnostics);
  s.gpus = int(as_int(required(document, "gpus"), "gpus", 1, 10'000'000));
  if (const json* per_node = member(document, "gpus_per_node"))
    s.gpus_per_node = int(as_int(*per_node, "gpus_per_node", 0, 1024));
  std::optional<std::int64_t> hidden;
  if (s.model.shape) hidden = s.model.shape->hidden;
  s.config = parse_training_config(as_object(required(document, "deepspeed"), "deepspeed"),
                                   diagnostics, hidden);
  if (const json* seq = member(document, "seq_len"))
    s.config.seq_len = as_int(*seq, "seq_len", 1, std::int64_t(1) << 24);
  return s;
}

}  // namespace

json settings_to_json(const Settings& s) {
  json document = {{"schema", "zerolens.gui-config"},
                   {"version", kConfigFileVersion},
                   {"model", model_json(s)},
                   {"cluster", is_cluster_preset(s.cluster_source) ? json(s.cluster_source)
                                                                   : cluster_to_json(s.cluster)},
                   {"gpus", s.gpus},
                   {"gpus_per_node", s.gpus_per_node},
                   {"deepspeed", to_deepspeed_json(s.config)}};
  if (s.config.seq_len) document["seq_len"] = *s.config.seq_len;
  return document;
}

Settings settings_from_json(const json& document, const Settings& current,
                            Diagnostics& diagnostics) {
  as_object(document, "config");
  const json* schema = member(document, "schema");
  if (schema && as_string(*schema, "schema") == "zerolens.gui-config")
    return read_gui_config(document, diagnostics);
  if (schema)
    throw InputError(
        "schema",
        "not a zerolens GUI config (expected \"zerolens.gui-config\") nor a DeepSpeed config");
  Settings s = current;
  apply_deepspeed_config(s, document, diagnostics);
  s.walkthrough = false;
  return s;
}

Settings read_config_file(const std::string& path, const Settings& current,
                          Diagnostics& diagnostics) {
  const json document = parse_json_file(path, path);
  try {
    Settings s = settings_from_json(document, current, diagnostics);
    if (!member(document, "schema")) s.deepspeed_source = path;
    return s;
  } catch (const InputError& error) {
    throw InputError(path, error.what());
  }
}

Trace read_trace_file(const std::string& path) {
  const json document = parse_json_file(path, path);
  try {
    return trace_from_json(document);
  } catch (const InputError& error) {
    throw InputError(path, error.what());
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  file_io::write_file_atomically(path, text);
}

}  // namespace zerolens::gui
