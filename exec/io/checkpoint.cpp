// Saving (collective, all-or-nothing), finding, loading with verification and resharding, and the
// safetensors export of ZeRO checkpoints.
#include "exec/io/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/io/checkpoint_file.hpp"

namespace zerolens::exec {
namespace {

namespace fs = std::filesystem;
using namespace checkpoint_detail;
using json = nlohmann::json;

// Every rank learns whether any rank failed (uncounted: checkpointing is not part of the step).
void agree(Communicator& comm, const std::string& local_error) {
  const double failures = comm.report_sum(local_error.empty() ? 0.0 : 1.0);
  if (!local_error.empty()) throw CheckpointError("checkpoint not saved: " + local_error);
  if (failures > 0) throw CheckpointError("checkpoint not saved: another rank failed to write its part (see its error)");
}

template <typename Action>
std::string attempt(Action&& action) {
  try {
    action();
    return {};
  } catch (const std::exception& error) {
    return error.what();
  }
}

void create_partial(const fs::path& directory, const fs::path& partial) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw CheckpointError(directory.string() + ": cannot create: " + error.message());
  fs::remove_all(partial, error);
  if (!fs::create_directory(partial, error) || error) {
    throw CheckpointError(partial.string() + ": cannot create: " + (error ? error.message() : "exists"));
  }
}

// Rank 0, once every rank file is written: verify them, write the manifest, publish atomically.
void publish(const fs::path& directory, const fs::path& partial, const fs::path& final_dir, const CheckpointMeta& meta) {
  json manifest = meta_to_json(meta);
  json files = json::array();
  for (int r = 0; r < meta.dp_size; ++r) {
    const fs::path file = partial / rank_file_name(r);
    const auto bytes = read_file(file);
    decode_rank_file(bytes, file.string(), meta.optimizer_states);  // what was written reads back
    files.push_back({{"name", rank_file_name(r)}, {"bytes", bytes.size()}, {"crc32", crc32_of(bytes, bytes.size())}});
  }
  manifest["files"] = files;
  replace_file(partial / "manifest.json", manifest.dump(1));
  std::error_code error;
  const fs::path previous = final_dir.string() + ".old";
  fs::remove_all(previous, error);
  if (fs::exists(final_dir)) fs::rename(final_dir, previous, error);
  if (error) throw CheckpointError(final_dir.string() + ": cannot move aside: " + error.message());
  fs::rename(partial, final_dir, error);
  if (error) throw CheckpointError(final_dir.string() + ": cannot publish: " + error.message());
  replace_file(directory / "latest", final_dir.filename().string() + "\n");
  fs::remove_all(previous, error);
}

void check_segment(const CheckpointSegment& s, const CheckpointMeta& meta, const std::string& file) {
  if (s.tensor < 0 || std::size_t(s.tensor) >= meta.tensors.size() || s.begin < 0 || s.length < 0 ||
      s.length > meta.tensors[std::size_t(s.tensor)].numel - s.begin) {
    throw CheckpointError(file + ": segment outside its tensor");
  }
}

// Copies one rank's segments into the whole tensors, counting how often each element is written.
void place(const RankShard& shard, const std::string& file, FullState& state, std::vector<std::vector<std::uint8_t>>& seen) {
  std::size_t offset = 0;
  for (const CheckpointSegment& s : shard.segments) {
    check_segment(s, state.meta, file);
    if (offset + std::size_t(s.length) > shard.master.size()) throw CheckpointError(file + ": segments exceed the payload");
    const auto t = std::size_t(s.tensor);
    for (Elements i = 0; i < s.length; ++i) {
      const auto at = std::size_t(s.begin + i);
      if (seen[t][at]++) throw CheckpointError(file + ": element " + std::to_string(at) + " of " + state.meta.tensors[t].name + " saved twice");
      state.master[t][at] = shard.master[offset + std::size_t(i)];
      for (std::size_t k = 0; k < shard.states.size(); ++k) state.states[k][t][at] = shard.states[k][offset + std::size_t(i)];
    }
    offset += std::size_t(s.length);
  }
  if (offset != shard.master.size()) throw CheckpointError(file + ": payload larger than its segments");
}

}  // namespace

fs::path save_checkpoint(const fs::path& directory, const CheckpointMeta& meta, const RankShard& shard, Communicator& comm) {
  const fs::path final_dir = directory / step_name(meta.step);
  const fs::path partial = final_dir.string() + ".partial";
  const bool leader = comm.rank() == 0;
  // A failed save, or one a signal interrupts (Interrupted from a collective), leaves no partial
  // directory behind.
  try {
    agree(comm, leader ? attempt([&] { create_partial(directory, partial); }) : std::string());
    std::string error = attempt(
        [&] { write_file(partial / rank_file_name(comm.rank()), encode_rank_file(shard)); });
    agree(comm, error);
    agree(comm, leader ? attempt([&] { publish(directory, partial, final_dir, meta); }) : std::string());
  } catch (...) {
    std::error_code ignored;
    if (leader) fs::remove_all(partial, ignored);
    throw;
  }
  return final_dir;
}

// "; checkpoints in DIR: step_00000003, step_00000006" when the parent holds some (a mistyped step).
static std::string checkpoints_beside(const fs::path& directory) {
  std::error_code error;
  std::vector<std::string> steps;
  const fs::path parent = directory.has_parent_path() ? directory.parent_path() : fs::path(".");
  for (const auto& entry : fs::directory_iterator(parent, error)) {
    if (fs::exists(entry.path() / "manifest.json", error)) steps.push_back(entry.path().filename().string());
  }
  if (steps.empty()) return "";
  std::sort(steps.begin(), steps.end());
  std::string list = "; checkpoints in " + parent.string() + ":";
  for (const std::string& step : steps) list += " " + step;
  return list;
}

fs::path resolve_checkpoint(const fs::path& directory) {
  if (fs::exists(directory / "manifest.json")) return directory;
  const fs::path latest = directory / "latest";
  if (!fs::exists(latest)) {
    throw CheckpointError(directory.string() + ": no checkpoint here (no manifest.json or latest)" +
                          checkpoints_beside(directory));
  }
  const auto bytes = read_file(latest);
  std::string name(bytes.begin(), bytes.end());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) throw CheckpointError(latest.string() + ": does not name a step directory");
  return directory / name;
}

FullState load_checkpoint(const fs::path& step_directory) {
  const fs::path manifest_file = step_directory / "manifest.json";
  const auto manifest_bytes = read_file(manifest_file);
  json manifest;
  try {
    manifest = json::parse(manifest_bytes.begin(), manifest_bytes.end());
  } catch (const json::exception& error) {
    throw CheckpointError(manifest_file.string() + ": not JSON: " + error.what());
  }
  FullState state;
  state.meta = meta_from_json(manifest, manifest_file.string());
  const std::vector<ManifestFile> files = files_from_json(manifest, manifest_file.string(), state.meta.dp_size);
  // The rank files hold every element once: their sizes on disk bound what the manifest's tensors
  // may claim, checked before the whole tensors are allocated.
  std::uint64_t stored = 0;
  for (const ManifestFile& entry : files) {
    const fs::path file = step_directory / entry.name;
    std::error_code error;
    const std::uintmax_t size = fs::file_size(file, error);
    if (error) throw CheckpointError(file.string() + ": cannot open (missing or unreadable)");
    if (size != entry.bytes) {
      throw CheckpointError(file.string() + ": size or checksum differs from the manifest: the file is corrupted or was replaced");
    }
    stored += std::min<std::uint64_t>(size, std::numeric_limits<std::uint64_t>::max() - stored);
  }
  const std::uint64_t capacity = stored / (sizeof(float) * std::uint64_t(1 + state.meta.optimizer_states));
  std::uint64_t claimed = 0;
  for (const auto& t : state.meta.tensors) {
    claimed += std::uint64_t(t.numel);  // each below 2^63: no wrap before the check
    if (claimed > capacity) {
      throw CheckpointError(manifest_file.string() + ": tensors claim more elements than the rank files' " + std::to_string(stored) +
                            " bytes can hold (at " + t.name + ")");
    }
  }
  const auto& tensors = state.meta.tensors;
  std::vector<std::vector<std::uint8_t>> seen;
  for (const auto& t : tensors) {
    state.master.emplace_back(std::size_t(t.numel));
    seen.emplace_back(std::size_t(t.numel), 0);
  }
  state.states.assign(std::size_t(state.meta.optimizer_states), state.master);
  for (const ManifestFile& entry : files) {
    const fs::path file = step_directory / entry.name;
    const auto bytes = read_file(file);
    if (bytes.size() != entry.bytes || crc32_of(bytes, bytes.size()) != entry.crc32) {
      throw CheckpointError(file.string() + ": size or checksum differs from the manifest: the file is corrupted or was replaced");
    }
    place(decode_rank_file(bytes, file.string(), state.meta.optimizer_states), file.string(), state, seen);
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    for (std::size_t i = 0; i < seen[t].size(); ++i) {
      if (!seen[t][i]) throw CheckpointError(step_directory.string() + ": element " + std::to_string(i) + " of " + tensors[t].name + " is in no rank file");
    }
  }
  return state;
}

void write_safetensors(const fs::path& file, const FullState& state) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}, {"source", "zerolens consolidate"}, {"model", state.meta.model},
                            {"step", std::to_string(state.meta.step)}};
  std::size_t offset = 0;
  for (std::size_t t = 0; t < state.meta.tensors.size(); ++t) {
    const std::size_t bytes = state.master[t].size() * sizeof(float);
    header[state.meta.tensors[t].name] = {{"dtype", "F32"}, {"shape", state.meta.tensors[t].shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::vector<unsigned char> out(sizeof(std::uint64_t) + text.size() + offset);
  const std::uint64_t length = text.size();
  std::memcpy(out.data(), &length, sizeof length);  // little-endian on every target zerolens builds for
  std::memcpy(out.data() + sizeof length, text.data(), text.size());
  std::size_t at = sizeof length + text.size();
  for (const auto& tensor : state.master) {
    std::memcpy(out.data() + at, tensor.data(), tensor.size() * sizeof(float));
    at += tensor.size() * sizeof(float);
  }
  write_file(file, out);
}

}  // namespace zerolens::exec
