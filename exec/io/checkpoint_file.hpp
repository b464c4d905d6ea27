#pragma once
// Checkpoint files (internal to exec/checkpoint*.cpp): whole-file writes that report errno by name,
// the rank file layout, and the manifest's JSON.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/io/checkpoint.hpp"

namespace zerolens::exec::checkpoint_detail {

// Version 2 (issue 19): rank files carry the save's identifier, the manifest records it and each
// file's body CRC-32 (not the CRC-32 of a file ending in its own CRC, which is a constant). Files
// of version 1 are refused with a message that says so.
inline constexpr char kMagic[8] = {'Z', 'L', 'C', 'K', 'P', 'T', '0', '2'};
inline constexpr int kVersion = 2;

// The largest `latest` and manifest.json read (a manifest lists tensors and one entry per rank).
inline constexpr std::uintmax_t kMaxLatestBytes = 4096;
inline constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{64} << 20;

std::uint32_t crc32_of(std::span<const unsigned char> bytes, std::size_t count);
// The CRC-32 of everything before a rank file's trailing CRC (what the trailer and the manifest
// hold).
std::uint32_t body_crc32_of(std::span<const unsigned char> bytes);

// Writes `bytes` to `file` whole (a temporary beside it, checked writes, fsync, rename); throws
// CheckpointError naming the file and the OS error (ENOSPC, EACCES, EIO, ...).
void write_file(const std::filesystem::path& file, std::string_view bytes);
// The regular file `file`, at most `max_bytes` of it (`kind` names it in the error); a directory, a
// FIFO, a device or a larger file is refused without blocking. Throws CheckpointError.
std::string read_file(const std::filesystem::path& file, std::uintmax_t max_bytes,
                      const std::string& kind);
std::span<const unsigned char> as_bytes(const std::string& text);

// The save identifier as 16 lowercase hex digits, and back (CheckpointError naming `file`,
// `field`).
std::string save_id_text(std::uint64_t save_id);
std::uint64_t save_id_from(const nlohmann::json& value, const std::string& file,
                           const std::string& field);

std::vector<unsigned char> encode_rank_file(const RankShard& shard, std::uint64_t save_id = 0);
// Verifies magic, CRC-32 and header (integers in range, `states` as the manifest says, segments
// covering exactly the header's element count, the payload exactly that many elements) before it
// allocates anything; throws CheckpointError naming `file` and the field. Stores the header's save
// identifier in `save_id` when given.
RankShard decode_rank_file(std::span<const unsigned char> bytes, const std::string& file,
                           int states, std::uint64_t* save_id = nullptr);

// The manifest without "files"; `save_id` is the save's identifier every rank file must carry.
nlohmann::json meta_to_json(const CheckpointMeta& meta, std::uint64_t save_id = 0);
// Verifies schema, version, every field's type and range, unique tensor names and that each
// tensor's numel is the product of its shape; throws CheckpointError naming `file` and the field.
CheckpointMeta meta_from_json(const nlohmann::json& document, const std::string& file);

// One entry of the manifest's "files": rank r's file name (rank_file_name(r)), size and body
// CRC-32.
struct ManifestFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint32_t body_crc32 = 0;
};
// The manifest's "files", one per rank in rank order; throws CheckpointError naming `file`.
std::vector<ManifestFile> files_from_json(const nlohmann::json& document, const std::string& file, int dp_size);
// The manifest's "save_id"; throws CheckpointError naming `file`.
std::uint64_t save_id_from_manifest(const nlohmann::json& document, const std::string& file);

std::string step_name(std::int64_t step);
std::string rank_file_name(int rank);

}  // namespace zerolens::exec::checkpoint_detail
