// The one JSON reader every model, config, cluster and trace file goes through (issue 19, finding
// 3 and 4): what it refuses and how it names it. Each case was accepted before (last key won, the
// text after a NUL was ignored, /dev/zero was read until memory ran out).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "sim/core/json_read.hpp"

namespace zerolens::json_read {
namespace {

namespace fs = std::filesystem;

// The InputError's message, or "(no error)".
std::string error_of(const std::string& text) {
  try {
    parse_json_text(text, "config.json");
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

std::string file_error_of(const std::string& path) {
  try {
    parse_json_file(path, "--deepspeed-config");
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(JsonInput, DuplicateKeysAreRefusedWithTheirPath) {
  const std::string error = error_of(R"({"zero_optimization": {"stage": 2, "stage": 3}})");
  EXPECT_NE(error.find("duplicate key 'zero_optimization.stage'"), std::string::npos) << error;
  // Outer keys after a nested object, and objects inside arrays.
  EXPECT_NE(error_of(R"({"a": {"b": 1}, "c": 1, "c": 2})").find("duplicate key 'c'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"l": [{"x": 1, "x": 2}]})").find("duplicate key 'l.x'"),
            std::string::npos);
  // The same key in two different objects is no duplicate.
  EXPECT_EQ(error_of(R"({"a": {"stage": 1}, "b": {"stage": 2}, "l": [{"x": 1}, {"x": 2}]})"),
            "(no error)");
}

TEST(JsonInput, NulBytesAndTrailingTextAreRefused) {
  const std::string with_nul = std::string(R"({"train_batch_size": 8})") + '\0' + R"({"x": 1})";
  EXPECT_NE(error_of(with_nul).find("NUL byte at offset 23"), std::string::npos)
      << error_of(with_nul);
  EXPECT_NE(error_of(R"({"a": 1} {"b": 2})").find("invalid JSON"), std::string::npos);
  EXPECT_EQ(parse_json_text(R"({"a": 1})", "x").at("a"), 1);
  // A number beyond a double is an input error too, not an internal one (nlohmann's out_of_range).
  EXPECT_NE(error_of(R"({"train_batch_size": 1E999})").find("invalid JSON"), std::string::npos)
      << error_of(R"({"train_batch_size": 1E999})");
}

TEST(JsonInput, DirectoriesDevicesAndMissingFilesAreNamed) {
  const fs::path directory = fs::temp_directory_path();
  EXPECT_NE(file_error_of(directory.string()).find("is a directory"), std::string::npos);
  EXPECT_NE(file_error_of("/dev/zero").find("not a regular file"), std::string::npos);
  EXPECT_NE(file_error_of("/no/such/file.json").find("no such file"), std::string::npos);
  const fs::path good = directory / "zerolens_json_input_test.json";
  std::ofstream(good) << R"({"stage": 3})";
  EXPECT_EQ(parse_json_file(good.string(), "--x").at("stage"), 3);
  fs::remove(good);
}

}  // namespace
}  // namespace zerolens::json_read
