// Fuzzes the checkpoint readers: the rank file decoder (the first byte picks the optimizer state
// count, 0..2; the rest is the file) and the manifest reader (the rest as JSON). Any input either
// decodes to a shard whose arrays fit in the input, or to a manifest whose facts hold together, or
// raises CheckpointError; nothing else escapes (a huge allocation, a crash or another exception is a
// bug). What decodes round trips through the encoders. Rank files are decoded as given (the CRC-32
// refuses nearly every mutation) and again with their CRC-32 made right, so mutations reach the
// header and payload checks behind it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/io/checkpoint_file.hpp"

namespace {

using namespace zerolens::exec;
using namespace zerolens::exec::checkpoint_detail;

void check_shard(const RankShard& shard, std::size_t input_bytes, int states) {
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
  const RankShard again = decode_rank_file(encode_rank_file(shard), "again", states);
  if (again.rank != shard.rank || again.segments.size() != shard.segments.size() || again.states.size() != shard.states.size() ||
      encode_rank_file(again) != encode_rank_file(shard)) {
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
  const nlohmann::json written = meta_to_json(meta);
  if (meta_to_json(meta_from_json(written, "again")) != written) std::abort();
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
    check_shard(decode_rank_file(bytes, "rank_00000.bin", states), bytes.size(), states);
  } catch (const CheckpointError&) {
  }
  // The same bytes with a correct CRC-32, so that mutations reach the header and the payload.
  if (bytes.size() >= sizeof(std::uint32_t)) {
    std::vector<unsigned char> sealed = bytes;
    const std::size_t body = sealed.size() - sizeof(std::uint32_t);
    const std::uint32_t crc = crc32_of(sealed, body);
    std::memcpy(sealed.data() + body, &crc, sizeof crc);
    try {
      check_shard(decode_rank_file(sealed, "rank_00000.bin", states), sealed.size(), states);
    } catch (const CheckpointError&) {
    }
  }
  const auto document = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (document.is_discarded()) return 0;
  try {
    check_meta(meta_from_json(document, "manifest.json"), document);
  } catch (const CheckpointError&) {
  }
  return 0;
}
