#pragma once
// Checkpoint files (internal to exec/checkpoint*.cpp): whole-file writes that report errno by name,
// the rank file layout, and the manifest's JSON.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/io/checkpoint.hpp"

namespace zerolens::exec::checkpoint_detail {

inline constexpr char kMagic[8] = {'Z', 'L', 'C', 'K', 'P', 'T', '0', '1'};
inline constexpr int kVersion = 1;

std::uint32_t crc32_of(const std::vector<unsigned char>& bytes, std::size_t count);

// Writes `bytes` to `file` and fsyncs it; throws CheckpointError naming the file and the errno text
// (ENOSPC, EACCES, EIO, ...). A short write is an error, never a silently shorter file.
void write_file(const std::filesystem::path& file, const std::vector<unsigned char>& bytes);
std::vector<unsigned char> read_file(const std::filesystem::path& file);
// Writes `file` through `file`.tmp and a rename, so readers see the old or the new content.
void replace_file(const std::filesystem::path& file, const std::string& text);

std::vector<unsigned char> encode_rank_file(const RankShard& shard);
// Verifies magic, CRC-32 and header (integers in range, `states` as the manifest says, segments
// covering exactly the header's element count, the payload exactly that many elements) before it
// allocates anything; throws CheckpointError naming `file` and the field.
RankShard decode_rank_file(const std::vector<unsigned char>& bytes, const std::string& file, int states);

nlohmann::json meta_to_json(const CheckpointMeta& meta);
// Verifies schema, version, every field's type and range, unique tensor names and that each
// tensor's numel is the product of its shape; throws CheckpointError naming `file` and the field.
CheckpointMeta meta_from_json(const nlohmann::json& document, const std::string& file);

// One entry of the manifest's "files": rank r's file name (rank_file_name(r)), size and CRC-32.
struct ManifestFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};
// The manifest's "files", one per rank in rank order; throws CheckpointError naming `file`.
std::vector<ManifestFile> files_from_json(const nlohmann::json& document, const std::string& file, int dp_size);

std::string step_name(std::int64_t step);
std::string rank_file_name(int rank);

}  // namespace zerolens::exec::checkpoint_detail
