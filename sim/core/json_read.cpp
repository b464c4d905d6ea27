#include "sim/core/json_read.hpp"

#include "sim/core/file_io.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

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

namespace {

// Throws on a key given twice in one object (as DeepSpeed's dict_raise_error_on_duplicate_keys
// does), naming its path: nlohmann keeps the last silently.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(std::string file) : file_(std::move(file)) {}
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        objects_.push_back({path_.size(), {}});
        break;
      case json::parse_event_t::key:
        key(parsed.get<std::string>());
        break;
      case json::parse_event_t::object_end:
        objects_.pop_back();
        break;
      case json::parse_event_t::value:
      case json::parse_event_t::array_end:
        leave_value();
        break;
      case json::parse_event_t::array_start:
        break;
    }
    return true;
  }

 private:
  struct Object {
    std::size_t depth;  // path_.size() when the object began
    std::set<std::string> keys;
  };
  void key(const std::string& name) {
    Object& object = objects_.back();
    path_.resize(object.depth);
    path_.push_back(name);
    if (!object.keys.insert(name).second) {
      std::string where;
      for (const std::string& part : path_) where = join_key(where, part);
      throw InputError(file_, "duplicate key '" + where + "' (given twice in one object)");
    }
  }
  void leave_value() {
    if (!objects_.empty()) path_.resize(objects_.back().depth);
  }
  std::string file_;
  std::vector<std::string> path_;
  std::vector<Object> objects_;
};

}  // namespace

json parse_json_text(const std::string& text, const std::string& where) {
  const std::size_t nul = text.find('\0');
  if (nul != std::string::npos)
    throw InputError(where, "invalid JSON: a NUL byte at offset " + std::to_string(nul));
  try {
    DuplicateKeyCheck check(where);
    return json::parse(text, std::ref(check));
  } catch (const json::exception& error) {  // parse_error, and out_of_range for numbers such as 1E999
    throw InputError(where, std::string("invalid JSON: ") + error.what());
  }
}

json parse_json_file(const std::string& path, const std::string& flag) {
  return parse_json_text(file_io::read_regular_file(path, flag, kMaxJsonFileBytes, "a JSON file"),
                         path);
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
