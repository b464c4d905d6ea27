// Checkpoint file formats: the rank file (magic, JSON header, float32 payload, CRC-32) and the
// manifest, and file writes whose failures name the file and the reason.
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "exec/io/checkpoint_file.hpp"
#include "sim/core/error.hpp"
#include "sim/core/file_io.hpp"

namespace zerolens::exec::checkpoint_detail {
namespace {

using json = nlohmann::json;

constexpr std::int64_t kMaxElements = std::numeric_limits<std::int64_t>::max();

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError(file.string() + ": " + what);
}

void append(std::vector<unsigned char>& out, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  out.insert(out.end(), bytes, bytes + size);
}

// A JSON value as it appears in a message, cut short.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// `object`[key]; `where` names the object in the message when it is not one or lacks the key.
const json& member(const json& object, const char* key, const std::string& file, const std::string& where) {
  if (!object.is_object()) fail(file, where + " must be an object, got " + shown(object));
  const auto found = object.find(key);
  if (found == object.end()) fail(file, where + " has no " + key);
  return *found;
}

// An integer in [min, max] (never a fraction, a float or a number that would wrap); else an error
// naming the file and the field.
std::int64_t integer(const json& value, const std::string& file, const std::string& field, std::int64_t min, std::int64_t max) {
  if (!value.is_number_integer()) fail(file, field + " must be an integer, got " + shown(value));
  if (value.is_number_unsigned() ? value.get<std::uint64_t>() > std::uint64_t(max) : value.get<std::int64_t>() > max) {
    fail(file, field + " must be at most " + std::to_string(max) + ", got " + shown(value));
  }
  const auto number = value.get<std::int64_t>();
  if (number < min) fail(file, field + " must be at least " + std::to_string(min) + ", got " + shown(value));
  return number;
}

std::string text(const json& value, const std::string& file, const std::string& field) {
  if (!value.is_string()) fail(file, field + " must be a string, got " + shown(value));
  return value.get<std::string>();
}

template <typename T>
T read_at(std::span<const unsigned char> bytes, std::size_t offset) {
  T value{};
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// `count` floats from `offset` (which the caller checked lie inside `bytes`).
std::vector<float> floats_at(std::span<const unsigned char> bytes, std::size_t offset,
                             std::size_t count) {
  std::vector<float> values(count);
  if (count > 0) std::memcpy(values.data(), bytes.data() + offset, count * sizeof(float));
  return values;
}

}  // namespace

std::uint32_t crc32_of(std::span<const unsigned char> bytes, std::size_t count) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t offset = 0; offset < count;) {
    const std::size_t chunk = std::min<std::size_t>(count - offset, 1u << 30);
    crc = crc32(crc, bytes.data() + offset, uInt(chunk));
    offset += chunk;
  }
  return std::uint32_t(crc);
}

std::uint32_t body_crc32_of(std::span<const unsigned char> bytes) {
  return crc32_of(bytes,
                  bytes.size() < sizeof(std::uint32_t) ? 0 : bytes.size() - sizeof(std::uint32_t));
}

void write_file(const std::filesystem::path& file, std::string_view bytes) {
  try {
    file_io::write_file_atomically(file.string(), bytes);
  } catch (const InputError& error) {
    throw CheckpointError(error.what());
  }
}

std::string read_file(const std::filesystem::path& file, std::uintmax_t max_bytes,
                      const std::string& kind) {
  try {
    return file_io::read_regular_file(file.string(), file.string(), max_bytes, kind);
  } catch (const InputError& error) {
    throw CheckpointError(error.what());
  }
}

std::span<const unsigned char> as_bytes(const std::string& text) {
  return {reinterpret_cast<const unsigned char*>(text.data()), text.size()};
}

std::string save_id_text(std::uint64_t save_id) {
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << save_id;
  return out.str();
}

std::uint64_t save_id_from(const json& value, const std::string& file, const std::string& field) {
  const std::string digits = text(value, file, field);
  if (digits.size() != 16 || digits.find_first_not_of("0123456789abcdef") != std::string::npos) {
    fail(file, field + " must be 16 lowercase hex digits, got " + shown(value));
  }
  return std::stoull(digits, nullptr, 16);
}

std::vector<unsigned char> encode_rank_file(const RankShard& shard, std::uint64_t save_id) {
  json segments = json::array();
  for (const auto& s : shard.segments) segments.push_back({s.tensor, s.begin, s.length});
  const std::string header = json{{"version", kVersion},
                                  {"save_id", save_id_text(save_id)},
                                  {"rank", shard.rank},
                                  {"segments", segments},
                                  {"elements", shard.master.size()},
                                  {"states", shard.states.size()}}
                                 .dump();
  std::vector<unsigned char> out;
  append(out, kMagic, sizeof kMagic);
  const std::uint64_t header_length = header.size();
  append(out, &header_length, sizeof header_length);
  append(out, header.data(), header.size());
  append(out, shard.master.data(), shard.master.size() * sizeof(float));
  for (const auto& state : shard.states) append(out, state.data(), state.size() * sizeof(float));
  const std::uint32_t crc = crc32_of(out, out.size());
  append(out, &crc, sizeof crc);
  return out;
}

RankShard decode_rank_file(std::span<const unsigned char> bytes, const std::string& file,
                           int states, std::uint64_t* save_id) {
  constexpr std::size_t kLead = sizeof kMagic + sizeof(std::uint64_t);
  if (bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic - 2) == 0 &&
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    fail(file, "a rank file of another checkpoint format version (" +
                   std::string(bytes.begin() + 6, bytes.begin() + 8) +
                   "; this zerolens reads version " + std::to_string(kVersion) +
                   " only): save the checkpoint again");
  }
  if (bytes.size() < kLead + sizeof(std::uint32_t) || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    fail(file, "not a zerolens checkpoint rank file (bad magic or truncated)");
  }
  const std::size_t body = bytes.size() - sizeof(std::uint32_t);
  if (crc32_of(bytes, body) != read_at<std::uint32_t>(bytes, body)) fail(file, "checksum mismatch: the file is corrupted");
  const auto header_length = read_at<std::uint64_t>(bytes, sizeof kMagic);
  if (header_length > body - kLead) {
    fail(file, "header length " + std::to_string(header_length) + " past the end of the file (" + std::to_string(bytes.size()) +
                   " bytes)");
  }
  const std::size_t payload_offset = kLead + std::size_t(header_length);
  const json header = json::parse(bytes.begin() + std::ptrdiff_t(kLead), bytes.begin() + std::ptrdiff_t(payload_offset), nullptr, false);
  if (header.is_discarded() || !header.is_object()) fail(file, "bad header: not a JSON object");
  const std::int64_t version =
      integer(member(header, "version", file, "header"), file, "header version", 0, kMaxElements);
  if (version != kVersion)
    fail(file, "header version " + std::to_string(version) + " is not " + std::to_string(kVersion));
  const std::uint64_t id =
      save_id_from(member(header, "save_id", file, "header"), file, "header save_id");
  if (save_id != nullptr) *save_id = id;
  RankShard shard;
  shard.rank = int(integer(member(header, "rank", file, "header"), file, "header rank", 0, std::numeric_limits<int>::max()));
  const std::int64_t declared = integer(member(header, "states", file, "header"), file, "header states", 0, 2);
  if (declared != states) {
    fail(file, "header states " + std::to_string(declared) + " differs from the manifest's optimizer_states " + std::to_string(states));
  }
  // Sizes are checked against the bytes there are before anything is allocated.
  const std::size_t payload = body - payload_offset;
  const std::size_t per_element = sizeof(float) * std::size_t(1 + states);
  const std::int64_t elements = integer(member(header, "elements", file, "header"), file, "header elements", 0, kMaxElements);
  if (payload % per_element != 0 || std::uint64_t(elements) != payload / per_element) {
    fail(file, "header elements " + std::to_string(elements) + " do not match the payload of " + std::to_string(payload) +
                   " bytes (" + std::to_string(per_element) + " per element)");
  }
  const json& segments = member(header, "segments", file, "header");
  if (!segments.is_array()) fail(file, "header segments must be an array, got " + shown(segments));
  std::int64_t owned = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::string field = "header segments[" + std::to_string(i) + "]";
    const json& s = segments[i];
    if (!s.is_array() || s.size() != 3) fail(file, field + " must be [tensor, begin, length], got " + shown(s));
    CheckpointSegment segment;
    segment.tensor = std::int32_t(integer(s[0], file, field + " tensor", 0, std::numeric_limits<std::int32_t>::max()));
    segment.begin = integer(s[1], file, field + " begin", 0, kMaxElements);
    segment.length = integer(s[2], file, field + " length", 0, kMaxElements - segment.begin);
    if (segment.length > elements - owned) {
      fail(file, field + " goes past the header's " + std::to_string(elements) + " elements");
    }
    owned += segment.length;
    shard.segments.push_back(segment);
  }
  if (owned != elements) {
    fail(file, "header segments cover " + std::to_string(owned) + " of its " + std::to_string(elements) + " elements");
  }
  const auto count = std::size_t(elements);
  shard.master = floats_at(bytes, payload_offset, count);
  for (int k = 0; k < states; ++k) shard.states.push_back(floats_at(bytes, payload_offset + std::size_t(1 + k) * count * sizeof(float), count));
  return shard;
}

json meta_to_json(const CheckpointMeta& meta, std::uint64_t save_id) {
  json tensors = json::array();
  for (const auto& t : meta.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"numel", t.numel}});
  return {{"schema", "zerolens.checkpoint"},
          {"version", kVersion},
          {"model", meta.model},
          {"tensors", tensors},
          {"step", meta.step},
          {"dp_size", meta.dp_size},
          {"stage", meta.stage},
          {"optimizer", meta.optimizer},
          {"optimizer_states", meta.optimizer_states},
          {"loss_scale", meta.loss_scale},
          {"good_steps", meta.good_steps},
          {"hysteresis_left", meta.hysteresis_left},
          {"save_id", save_id_text(save_id)}};
}

CheckpointMeta meta_from_json(const json& document, const std::string& file) {
  try {
    if (!document.is_object()) fail(file, "not a zerolens checkpoint manifest (not a JSON object)");
    const json& schema = member(document, "schema", file, "manifest");
    if (schema != "zerolens.checkpoint") fail(file, "not a zerolens checkpoint manifest (schema " + shown(schema) + ")");
    const std::int64_t version = integer(member(document, "version", file, "manifest"), file, "version", 0, kMaxElements);
    if (version != kVersion) {
      fail(file, "unsupported checkpoint version " + std::to_string(version) +
                     " (this zerolens reads version " + std::to_string(kVersion) +
                     " only; version 1 had no save identifier or body checksums: save it again)");
    }
    CheckpointMeta meta;
    meta.model = text(member(document, "model", file, "manifest"), file, "model");
    const json& tensors = member(document, "tensors", file, "manifest");
    if (!tensors.is_array()) fail(file, "tensors must be an array, got " + shown(tensors));
    std::set<std::string> names;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const std::string field = "tensors[" + std::to_string(i) + "]";
      const json& t = tensors[i];
      CheckpointTensor tensor;
      tensor.name = text(member(t, "name", file, field), file, field + " name");
      if (!names.insert(tensor.name).second) fail(file, field + " name '" + tensor.name + "' appears twice");
      const json& shape = member(t, "shape", file, field);
      if (!shape.is_array()) fail(file, field + " shape must be an array, got " + shown(shape));
      Elements product = 1;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        const std::int64_t dim = integer(shape[d], file, field + " shape[" + std::to_string(d) + "]", 0, kMaxElements);
        if (dim != 0 && product > kMaxElements / dim) fail(file, field + " shape " + shown(shape) + " has too many elements");
        product *= dim;
        tensor.shape.push_back(dim);
      }
      tensor.numel = integer(member(t, "numel", file, field), file, field + " numel", 0, kMaxElements);
      if (tensor.numel != product) {
        fail(file, field + " (" + tensor.name + ") numel " + std::to_string(tensor.numel) + " differs from its shape " + shown(shape) +
                       " (" + std::to_string(product) + " elements)");
      }
      meta.tensors.push_back(std::move(tensor));
    }
    const auto field = [&](const char* key, std::int64_t min, std::int64_t max) {
      return integer(member(document, key, file, "manifest"), file, key, min, max);
    };
    constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
    meta.step = field("step", 0, kMaxElements);
    meta.dp_size = int(field("dp_size", 1, kMaxInt));
    meta.stage = int(field("stage", 0, 3));
    meta.optimizer = text(member(document, "optimizer", file, "manifest"), file, "optimizer");
    meta.optimizer_states = int(field("optimizer_states", 0, 2));
    const json& scale = member(document, "loss_scale", file, "manifest");
    if (!scale.is_number() || !std::isfinite(scale.get<double>()) || !(scale.get<double>() > 0)) {
      fail(file, "loss_scale must be a positive finite number, got " + shown(scale));
    }
    meta.loss_scale = scale.get<double>();
    meta.good_steps = field("good_steps", 0, kMaxElements);
    meta.hysteresis_left = int(field("hysteresis_left", 0, kMaxInt));
    return meta;
  } catch (const nlohmann::json::exception& error) {
    fail(file, std::string("bad manifest: ") + error.what());
  }
}

std::vector<ManifestFile> files_from_json(const json& document, const std::string& file, int dp_size) {
  const json& files = member(document, "files", file, "manifest");
  if (!files.is_array()) fail(file, "files must be an array, got " + shown(files));
  if (files.size() != std::size_t(dp_size)) {
    fail(file, "files lists " + std::to_string(files.size()) + " rank files for dp_size " + std::to_string(dp_size));
  }
  std::vector<ManifestFile> out;
  for (std::size_t r = 0; r < files.size(); ++r) {
    const std::string field = "files[" + std::to_string(r) + "]";
    ManifestFile entry;
    entry.name = text(member(files[r], "name", file, field), file, field + " name");
    if (entry.name != rank_file_name(int(r))) fail(file, field + " name must be " + rank_file_name(int(r)) + ", got '" + entry.name + "'");
    entry.bytes = std::uint64_t(integer(member(files[r], "bytes", file, field), file, field + " bytes", 0, kMaxElements));
    entry.body_crc32 =
        std::uint32_t(integer(member(files[r], "body_crc32", file, field), file,
                              field + " body_crc32", 0, std::numeric_limits<std::uint32_t>::max()));
    out.push_back(std::move(entry));
  }
  return out;
}

std::uint64_t save_id_from_manifest(const json& document, const std::string& file) {
  return save_id_from(member(document, "save_id", file, "manifest"), file, "save_id");
}

std::string step_name(std::int64_t step) {
  std::ostringstream name;
  name << "step_" << std::setw(8) << std::setfill('0') << step;
  return name.str();
}

std::string rank_file_name(int rank) {
  std::ostringstream name;
  name << "rank_" << std::setw(5) << std::setfill('0') << rank << ".bin";
  return name.str();
}

}  // namespace zerolens::exec::checkpoint_detail
