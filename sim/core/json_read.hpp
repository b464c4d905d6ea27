#pragma once
// Typed reads from JSON documents with errors that name the key path and the reason. Shared by the
// config, cluster and model parsers so every bad value is reported the same way.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/core/error.hpp"

namespace zerolens::json_read {

using nlohmann::json;

std::string join_key(const std::string& where, const std::string& key);
// "a string", "an array", ... for error messages.
std::string type_phrase(const json& value);

// Integer values; a JSON float is accepted when it is integral (5e8 is a common spelling).
std::int64_t as_int(const json& value, const std::string& where,
                    std::int64_t min = 0, std::int64_t max = std::numeric_limits<std::int64_t>::max());
double as_double(const json& value, const std::string& where, double min = 0,
                 double max = std::numeric_limits<double>::max());
bool as_bool(const json& value, const std::string& where);
std::string as_string(const json& value, const std::string& where);
const json& as_object(const json& value, const std::string& where);

// The member `key` of `object` or nullptr when absent (JSON null counts as absent).
const json* member(const json& object, const std::string& key);

// True when `spec` names a JSON file rather than a preset (ends in .json or exists on disk).
bool names_file(const std::string& spec);
// The largest JSON input read (a model, config, cluster or trace file).
inline constexpr std::uintmax_t kMaxJsonFileBytes = std::uintmax_t{1} << 30;
// Reads and parses a JSON file; InputError names the file (or `flag` when it cannot be read).
// Refused with a clear message: a directory, a FIFO or device, a file over kMaxJsonFileBytes, a NUL
// byte, a key given twice in one object, anything after the document.
json parse_json_file(const std::string& path, const std::string& flag);
// The same for text already read; `where` names it in errors.
json parse_json_text(const std::string& text, const std::string& where);

// Warns about keys of `object` that are not in `known`, naming the closest known key.
void warn_unknown_keys(const json& object, const std::vector<std::string>& known,
                       const std::string& where, Diagnostics& diagnostics);

}  // namespace zerolens::json_read
