// Fuzzes the checkpoint readers: the rank file decoder (the first byte picks the optimizer state
// count, 0..2; the rest is the file) and the manifest reader (the rest as JSON). Any input either
// decodes to a shard whose arrays fit in the input, or to a manifest whose facts hold together, or
// raises CheckpointError; nothing else escapes (a huge allocation, a crash or another exception is
// a bug). What decodes round trips through the encoders, save identifier included. Rank files are
// decoded as given (the CRC-32 refuses nearly every mutation) and again with their CRC-32 made
// right, so mutations reach the header and payload checks behind it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/io/checkpoint_file.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_read.hpp"

namespace {

using namespace zerolens::exec;
using namespace zerolens::exec::checkpoint_detail;

void check_shard(const RankShard& shard, std::uint64_t save_id, std::size_t input_bytes,
                 int states) {
  if (shard.states.size() != std::size_t(states)) std::abort();
  for (const auto& state : shard.states) {
    if (state.size() != shard.master.size()) std::abort();
  }
  if (shard.master.size() * sizeof(float) * std::size_t(1 + states) > input_bytes) std::abort();
  std::size_t owned = 0;
  for (const CheckpointSegment& s : shard.segments) {
    if (s.tensor < 0 || s.begin < 0 || s.length < 0 || s.length > INT64_MAX - s.begin) std::abort();
    owned += std::size_t(s.length);
  }
  if (owned != shard.master.size()) std::abort();
  std::uint64_t id_again = 0;
  const RankShard again =
      decode_rank_file(encode_rank_file(shard, save_id), "again", states, &id_again);
  if (again.rank != shard.rank || id_again != save_id ||
      again.segments.size() != shard.segments.size() ||
      again.states.size() != shard.states.size() ||
      encode_rank_file(again, save_id) != encode_rank_file(shard, save_id)) {
    std::abort();
  }
}

void check_meta(const CheckpointMeta& meta, const nlohmann::json& document) {
  if (meta.dp_size < 1 || meta.optimizer_states < 0 || meta.optimizer_states > 2) std::abort();
  if (meta.step < 0 || meta.good_steps < 0 || meta.hysteresis_left < 0 || !(meta.loss_scale > 0)) std::abort();
  for (const CheckpointTensor& t : meta.tensors) {
    zerolens::Elements product = 1;
    for (const std::int64_t dim : t.shape) {
      if (dim < 0 || (dim != 0 && product > INT64_MAX / dim)) std::abort();
      product *= dim;
    }
    if (t.numel != product) std::abort();
  }
  const std::uint64_t save_id = save_id_from_manifest(document, "manifest.json");
  const nlohmann::json written = meta_to_json(meta, save_id);
  if (meta_to_json(meta_from_json(written, "again"), save_id_from_manifest(written, "again")) !=
      written)
    std::abort();
  const auto files = files_from_json(document, "manifest.json", meta.dp_size);
  if (files.size() != std::size_t(meta.dp_size)) std::abort();
  for (std::size_t r = 0; r < files.size(); ++r) {
    if (files[r].name != rank_file_name(int(r))) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int states = data[0] % 3;
  const std::vector<unsigned char> bytes(data + 1, data + size);
  try {
    std::uint64_t save_id = 0;
    const RankShard shard = decode_rank_file(bytes, "rank_00000.bin", states, &save_id);
    check_shard(shard, save_id, bytes.size(), states);
  } catch (const CheckpointError&) {
  }
  // The same bytes with a correct CRC-32, so that mutations reach the header and the payload.
  if (bytes.size() >= sizeof(std::uint32_t)) {
    std::vector<unsigned char> sealed = bytes;
    const std::size_t body = sealed.size() - sizeof(std::uint32_t);
    const std::uint32_t crc = crc32_of(sealed, body);
    std::memcpy(sealed.data() + body, &crc, sizeof crc);
    try {
      std::uint64_t save_id = 0;
      const RankShard shard = decode_rank_file(sealed, "rank_00000.bin", states, &save_id);
      check_shard(shard, save_id, sealed.size(), states);
    } catch (const CheckpointError&) {
    }
  }
  // The manifest as the load reads it (duplicate keys, NUL bytes and trailing text refused).
  nlohmann::json document;
  try {
    document = zerolens::json_read::parse_json_text(std::string(bytes.begin(), bytes.end()),
                                                    "manifest.json");
  } catch (const zerolens::InputError&) {
    return 0;
  } catch (
      const nlohmann::json::exception&) {  // "1E999": parse_json_text lets out_of_range through
    return 0;
  }
  try {
    check_meta(meta_from_json(document, "manifest.json"), document);
  } catch (const CheckpointError&) {
  }
  return 0;
}
