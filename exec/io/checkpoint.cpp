// Saving (collective, all-or-nothing), finding, loading with verification and resharding, and the
// safetensors export of ZeRO checkpoints.
#include "exec/io/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/io/checkpoint_file.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_read.hpp"

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

// A fresh identifier for one save, made by rank 0 and shared (two exact 32-bit halves through the
// uncounted sum), so every rank file of the save carries it and a file of another save (another
// run, another step) is told apart on load.
std::uint64_t shared_save_id(Communicator& comm) {
  std::uint64_t id = 0;
  if (comm.rank() == 0) {
    try {  // never throw before the sums: the other ranks wait in them
      std::random_device random;
      id = (std::uint64_t(random()) << 32) ^ std::uint64_t(random());
    } catch (const std::exception&) {
      id = std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) ^
           (std::uint64_t(::getpid()) << 40);
    }
  }
  const double high = comm.report_sum(comm.rank() == 0 ? double(id >> 32) : 0.0);
  const double low = comm.report_sum(comm.rank() == 0 ? double(id & 0xffffffffu) : 0.0);
  return (std::uint64_t(high) << 32) | std::uint64_t(low);
}

// The size a rank file may be: what the manifest says (load), or any size up to 2^62 (verify).
constexpr std::uintmax_t kAnyRankFile = std::uintmax_t{1} << 62;

// Rank file `r` of the save `save_id`: read (bounded), decoded, its header's save identifier and
// rank checked against the manifest and its name. Returns the shard; `body_crc32` gets the file's.
RankShard read_rank_file(const fs::path& file, std::uintmax_t max_bytes, int rank,
                         std::uint64_t save_id, int states, std::uint32_t& body_crc32,
                         std::uint64_t& size) {
  const std::string bytes = read_file(file, max_bytes, "a rank file listed in the manifest");
  std::uint64_t saved_by = 0;
  RankShard shard = decode_rank_file(as_bytes(bytes), file.string(), states, &saved_by);
  if (saved_by != save_id) {
    throw CheckpointError(file.string() + ": belongs to another save (its save_id " +
                          save_id_text(saved_by) + ", the manifest's " + save_id_text(save_id) +
                          "): a file from another run or step was copied in");
  }
  if (shard.rank != rank) {
    throw CheckpointError(file.string() + ": holds rank " + std::to_string(shard.rank) +
                          "'s partition, not rank " + std::to_string(rank) +
                          "'s as its name and place in the manifest say");
  }
  body_crc32 = body_crc32_of(as_bytes(bytes));
  size = bytes.size();
  return shard;
}

// Rank 0, once every rank file is written: verify them, write the manifest, publish atomically.
void publish(const fs::path& directory, const fs::path& partial, const fs::path& final_dir,
             const CheckpointMeta& meta, std::uint64_t save_id) {
  json manifest = meta_to_json(meta, save_id);
  json files = json::array();
  for (int r = 0; r < meta.dp_size; ++r) {
    std::uint32_t crc = 0;
    std::uint64_t size = 0;
    read_rank_file(partial / rank_file_name(r), kAnyRankFile, r, save_id, meta.optimizer_states,
                   crc, size);  // reads back
    files.push_back({{"name", rank_file_name(r)}, {"bytes", size}, {"body_crc32", crc}});
  }
  manifest["files"] = files;
  write_file(partial / "manifest.json", manifest.dump(1));
  std::error_code error;
  const fs::path previous = final_dir.string() + ".old";
  fs::remove_all(previous, error);
  if (fs::exists(final_dir)) fs::rename(final_dir, previous, error);
  if (error) throw CheckpointError(final_dir.string() + ": cannot move aside: " + error.message());
  fs::rename(partial, final_dir, error);
  if (error) throw CheckpointError(final_dir.string() + ": cannot publish: " + error.message());
  write_file(directory / "latest", final_dir.filename().string() + "\n");
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
  const std::uint64_t save_id = shared_save_id(comm);
  // A failed save, or one a signal interrupts (Interrupted from a collective), leaves no partial
  // directory behind.
  try {
    agree(comm, leader ? attempt([&] { create_partial(directory, partial); }) : std::string());
    std::string error = attempt([&] {
      const std::vector<unsigned char> bytes = encode_rank_file(shard, save_id);
      write_file(partial / rank_file_name(comm.rank()),
                 std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    });
    agree(comm, error);
    agree(comm, leader ? attempt([&] { publish(directory, partial, final_dir, meta, save_id); })
                       : std::string());
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
  std::string name = read_file(latest, kMaxLatestBytes, "a checkpoint's latest file");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) throw CheckpointError(latest.string() + ": does not name a step directory");
  return directory / name;
}

FullState load_checkpoint(const fs::path& step_directory) {
  const fs::path manifest_file = step_directory / "manifest.json";
  const std::string manifest_text =
      read_file(manifest_file, kMaxManifestBytes, "a checkpoint manifest");
  json manifest;
  try {
    manifest = json_read::parse_json_text(manifest_text, manifest_file.string());
  } catch (const InputError& error) {
    throw CheckpointError(std::string(error.what()));
  } catch (const json::exception& error) {  // a number past double's range (out_of_range.406)
    throw CheckpointError(manifest_file.string() + ": invalid JSON: " + error.what());
  }
  FullState state;
  state.meta = meta_from_json(manifest, manifest_file.string());
  const std::vector<ManifestFile> files = files_from_json(manifest, manifest_file.string(), state.meta.dp_size);
  const std::uint64_t save_id = save_id_from_manifest(manifest, manifest_file.string());
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
  for (std::size_t r = 0; r < files.size(); ++r) {
    const fs::path file = step_directory / files[r].name;
    std::uint32_t crc = 0;
    std::uint64_t size = 0;
    const RankShard shard = read_rank_file(file, files[r].bytes, int(r), save_id,
                                           state.meta.optimizer_states, crc, size);
    if (size != files[r].bytes || crc != files[r].body_crc32) {
      throw CheckpointError(
          file.string() + ": size or checksum differs from the manifest (body CRC-32 " +
          std::to_string(crc) + ", the manifest's " + std::to_string(files[r].body_crc32) +
          "): the file is corrupted or was replaced");
    }
    place(shard, file.string(), state, seen);
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
    if (state.meta.tensors[t].name == "__metadata__") {
      throw CheckpointError(file.string() + ": tensor " + std::to_string(t) +
                            " is named __metadata__, the key safetensors reserves for its "
                            "metadata: rename it in the model");
    }
    const std::size_t bytes = state.master[t].size() * sizeof(float);
    header[state.meta.tensors[t].name] = {{"dtype", "F32"}, {"shape", state.meta.tensors[t].shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(sizeof(std::uint64_t) + text.size() + offset, '\0');
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
