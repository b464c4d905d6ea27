#pragma once
// The GUI's config file ("zerolens.gui-config", version 1): the model (preset name or layer list),
// the cluster (preset name or cluster JSON), the data-parallel size, the sequence length and the
// training config in DeepSpeed's keys, so the "deepspeed" member works as a DeepSpeed config.
// Opening a plain DeepSpeed config applies it to the current settings.
#include <nlohmann/json.hpp>
#include <string>

#include "gui/settings.hpp"

namespace zerolens::gui {

inline constexpr int kConfigFileVersion = 1;

nlohmann::json settings_to_json(const Settings& settings);
// A zerolens GUI config, or a DeepSpeed/ColossalAI config applied to `current`. Throws InputError
// naming the key.
Settings settings_from_json(const nlohmann::json& document, const Settings& current,
                            Diagnostics& diagnostics);

// Files. Each throws InputError naming the file.
Settings read_config_file(const std::string& path, const Settings& current,
                          Diagnostics& diagnostics);
Trace read_trace_file(const std::string& path);
void write_text_file(const std::string& path, const std::string& text);

}  // namespace zerolens::gui
