#include "sim/core/json_read.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zerolens::json_read {

std::string join_key(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

std::string type_phrase(const json& value) {
  switch (value.type()) {
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::null: return "null";
    default: return "a number";
  }
}

namespace {
std::string shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}
}  // namespace

std::int64_t as_int(const json& value, const std::string& where, std::int64_t min, std::int64_t max) {
  if (!value.is_number()) {
    throw InputError(where, "must be an integer, got " + type_phrase(value) + " " + shown(value));
  }
  double number = 0;
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t(max)) {
      throw InputError(where, "must be at most " + std::to_string(max) + ", got " + shown(value));
    }
    const std::int64_t integer = value.get<std::int64_t>();
    if (integer < min) {
      throw InputError(where, (min == 0 ? std::string("must not be negative") : "must be at least " + std::to_string(min)) +
                                  ", got " + shown(value));
    }
    if (integer > max) throw InputError(where, "must be at most " + std::to_string(max) + ", got " + shown(value));
    return integer;
  }
  number = value.get<double>();
  if (!std::isfinite(number) || number != std::floor(number)) {
    throw InputError(where, "must be an integer, got " + shown(value));
  }
  if (number < double(min)) {
    throw InputError(where, (min == 0 ? std::string("must not be negative") : "must be at least " + std::to_string(min)) +
                                ", got " + shown(value));
  }
  if (number >= 9.2e18 || number > double(max)) {
    throw InputError(where, "must be at most " + std::to_string(max) + ", got " + shown(value));
  }
  return std::int64_t(number);
}

double as_double(const json& value, const std::string& where, double min, double max) {
  if (!value.is_number()) {
    throw InputError(where, "must be a number, got " + type_phrase(value) + " " + shown(value));
  }
  const double number = value.get<double>();
  if (!std::isfinite(number)) throw InputError(where, "must be finite");
  if (number < min) {
    throw InputError(where, (min == 0 ? std::string("must not be negative") : "must be at least " + std::to_string(min)) +
                                ", got " + shown(value));
  }
  if (number > max) throw InputError(where, "must be at most " + std::to_string(max) + ", got " + shown(value));
  return number;
}

bool as_bool(const json& value, const std::string& where) {
  if (!value.is_boolean()) {
    throw InputError(where, "must be true or false, got " + type_phrase(value) + " " + shown(value));
  }
  return value.get<bool>();
}

std::string as_string(const json& value, const std::string& where) {
  if (!value.is_string()) throw InputError(where, "must be a string, got " + type_phrase(value));
  return value.get<std::string>();
}

const json& as_object(const json& value, const std::string& where) {
  if (!value.is_object()) throw InputError(where, "must be a JSON object, got " + type_phrase(value));
  return value;
}

const json* member(const json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool names_file(const std::string& spec) {
  return spec.find(".json") != std::string::npos || std::filesystem::exists(spec);
}

json parse_json_file(const std::string& path, const std::string& flag) {
  std::ifstream file(path);
  if (!file) throw InputError(flag, "cannot read file '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& error) {
    throw InputError(path, std::string("invalid JSON: ") + error.what());
  }
}

void warn_unknown_keys(const json& object, const std::vector<std::string>& known,
                       const std::string& where, Diagnostics& diagnostics) {
  if (!object.is_object()) return;
  for (const auto& item : object.items()) {
    bool found = false;
    for (const auto& name : known) found = found || name == item.key();
    if (found) continue;
    const std::string hint = closest_name(item.key(), known);
    diagnostics.warn(join_key(where, item.key()),
                     "unknown key, ignored" + (hint.empty() ? std::string() : " (did you mean '" + hint + "'?)"));
  }
}

}  // namespace zerolens::json_read
