#pragma once
// Models by name: the presets (GPT-2, LLaMA, ... families) and dense:<N>.
#include <string>
#include <vector>

#include "sim/model/model.hpp"

namespace zerolens {

std::vector<std::string> model_preset_names();
Model model_from_preset(const std::string& name);  // throws InputError for unknown names
Model model_from_dense(double parameter_count);    // "dense:<N>": exactly N parameters

}  // namespace zerolens
