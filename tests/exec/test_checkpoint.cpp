// Checkpoint files in one process: a round trip, the safetensors layout read back by a separate
// parser, corruption and truncation refused, a save that fails on a full disk leaves the previous
// checkpoint loadable, and the rank file and manifest readers refuse what fuzz_checkpoint found
// them accepting or crashing on (each test below the fuzzer's comment failed before its fix).
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "exec/comm/communicator.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/io/checkpoint_file.hpp"
#include "solo_communicator.hpp"

namespace zerolens::exec {
namespace {

namespace fs = std::filesystem;

using testing::SoloCommunicator;

CheckpointMeta two_tensors(std::int64_t step) {
  CheckpointMeta meta;
  meta.model = "test";
  meta.tensors = {{"a.weight", {3, 4}, 12}, {"a.bias", {5}, 5}};
  meta.step = step;
  meta.optimizer = "adamw";
  meta.optimizer_states = 2;
  return meta;
}

// One rank owning everything, in two segments per tensor (as a partition boundary would cut it).
RankShard whole_shard(float offset) {
  RankShard shard;
  shard.segments = {{0, 0, 7}, {0, 7, 5}, {1, 0, 5}};
  for (int i = 0; i < 17; ++i) shard.master.push_back(offset + float(i));
  shard.states = {shard.master, shard.master};
  for (auto& v : shard.states[0]) v *= 2;
  for (auto& v : shard.states[1]) v *= 3;
  return shard;
}

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir;
}

TEST(Checkpoint, RoundTripAndSafetensorsReadBack) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_round_trip");
  save_checkpoint(dir, two_tensors(7), whole_shard(0.5f), comm);
  const FullState state = load_checkpoint(resolve_checkpoint(dir));
  EXPECT_EQ(state.meta.step, 7);
  ASSERT_EQ(state.master.size(), 2u);
  EXPECT_EQ(state.master[1][4], 16.5f);
  EXPECT_EQ(state.states[1][0][11], 3 * 11.5f);

  const fs::path file = dir / "model.safetensors";
  write_safetensors(file, state);
  std::ifstream in(file, std::ios::binary);
  std::uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, ' ');
  in.read(header.data(), std::streamsize(length));
  const auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json.at("a.weight").at("dtype"), "F32");
  EXPECT_EQ(json.at("a.weight").at("shape"), nlohmann::json::array({3, 4}));
  const auto offsets = json.at("a.bias").at("data_offsets");
  EXPECT_EQ(offsets[1].get<int>() - offsets[0].get<int>(), 5 * 4);
  in.seekg(std::streamoff(8 + length + offsets[0].get<std::size_t>()));
  float bias[5];
  in.read(reinterpret_cast<char*>(bias), sizeof bias);
  EXPECT_EQ(bias[0], 12.5f);
  EXPECT_EQ((8 + length) % 8, 0u);
}

void expect_refused(const fs::path& dir, const std::string& what) {
  try {
    load_checkpoint(resolve_checkpoint(dir));
    ADD_FAILURE() << "loaded a checkpoint that is " << what;
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
  }
}

TEST(Checkpoint, CorruptedTruncatedOrMissingFilesAreRefused) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_corrupt");
  const fs::path step = save_checkpoint(dir, two_tensors(3), whole_shard(0), comm);
  const fs::path rank_file = step / "rank_00000.bin";
  {
    std::fstream f(rank_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x7f');
  }
  expect_refused(dir, "corrupted");
  save_checkpoint(dir, two_tensors(3), whole_shard(0), comm);
  fs::resize_file(rank_file, fs::file_size(rank_file) - 3);
  expect_refused(dir, "corrupted");
  fs::remove(rank_file);
  expect_refused(dir, "cannot open");
  std::ofstream(dir / "latest") << "../elsewhere\n";
  expect_refused(dir, "does not name a step directory");
}

TEST(Checkpoint, AnUnwritableDirectoryIsNamed) {
  SoloCommunicator comm;
  try {
    save_checkpoint("/proc/zerolens-checkpoint", two_tensors(1), whole_shard(0), comm);
    ADD_FAILURE() << "saved under /proc";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("/proc/zerolens-checkpoint"), std::string::npos) << error.what();
  }
}

// In a child with its own mount namespace, a 64 KiB tmpfs: a small checkpoint fits, a large one
// does not; the error says so and the small one still loads. Exit 77: no namespace here (skip).
int full_disk_child(const fs::path& dir) {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) return 77;
  SoloCommunicator comm;
  save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  CheckpointMeta big = two_tensors(2);
  big.tensors = {{"a.weight", {40000}, 40000}, {"a.bias", {5}, 5}};
  RankShard shard;
  shard.segments = {{0, 0, 40000}, {1, 0, 5}};
  shard.master.assign(40005, 1.0f);
  shard.states = {shard.master, shard.master};
  try {
    save_checkpoint(dir, big, shard, comm);
    return 10;
  } catch (const CheckpointError& error) {
    if (std::string(error.what()).find("No space left on device") == std::string::npos) return 11;
  }
  const FullState kept = load_checkpoint(resolve_checkpoint(dir));
  if (kept.meta.step != 1 || kept.master[0][3] != 3.0f) return 12;
  if (fs::exists(dir / "step_00000002.partial") || fs::exists(dir / "step_00000002")) return 13;
  return 0;
}

TEST(Checkpoint, AFullDiskKeepsThePreviousCheckpoint) {
  const fs::path dir = fresh_directory("ckpt_full_disk");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(full_disk_child(dir));
  int status = 0;
  ::waitpid(child, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) GTEST_SKIP() << "no private mount namespace for a small tmpfs here";
  EXPECT_EQ(code, 0) << "10: saved past a full disk, 11: the error does not say the disk is full, "
                        "12: the previous checkpoint does not load, 13: a partial save was left behind";
}

// --- Regressions found by fuzz_checkpoint (tests/fuzz) and the review that came with it. ---

// A rank file as a writer with another idea of the layout might make it: any header, any payload,
// a correct CRC-32.
std::vector<unsigned char> rank_file(std::string header, std::size_t payload_floats) {
  header.insert(1, R"("version":2,"save_id":"0000000000000000",)");
  const std::uint64_t length = header.size();
  std::vector<unsigned char> out(8 + 8 + header.size() + payload_floats * sizeof(float), 0);
  std::memcpy(out.data(), checkpoint_detail::kMagic, 8);
  std::memcpy(out.data() + 8, &length, 8);
  std::memcpy(out.data() + 16, header.data(), header.size());
  const std::uint32_t crc = checkpoint_detail::crc32_of(out, out.size());
  out.resize(out.size() + 4);
  std::memcpy(out.data() + out.size() - 4, &crc, 4);
  return out;
}

void expect_decode_refused(const std::vector<unsigned char>& bytes, int states, const std::string& what) {
  try {
    checkpoint_detail::decode_rank_file(bytes, "rank_00000.bin", states);
    ADD_FAILURE() << "decoded a rank file whose " << what << " is wrong";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("rank_00000.bin"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
  }
}

// The decoder passed a null pointer to memcpy for a rank that owns nothing (undefined behaviour:
// UBSan reports it; the asan preset's build fails this test without the fix).
TEST(Checkpoint, ARankOwningNothingRoundTrips) {
  RankShard empty;
  empty.rank = 3;
  empty.states = {{}, {}};
  const RankShard back = checkpoint_detail::decode_rank_file(checkpoint_detail::encode_rank_file(empty), "rank_00003.bin", 2);
  EXPECT_EQ(back.rank, 3);
  EXPECT_TRUE(back.master.empty());
  ASSERT_EQ(back.states.size(), 2u);
}

// An element count whose byte size wraps 2^64 (2^62 floats are "0 bytes") passed the payload check
// and the decoder tried to allocate 2^62 floats (std::length_error, or an out-of-memory abort).
TEST(Checkpoint, ARankHeaderElementCountIsCheckedAgainstThePayload) {
  expect_decode_refused(rank_file(R"({"rank":0,"segments":[[0,0,4611686018427387904]],"elements":4611686018427387904,"states":0})", 0), 0,
                        "header elements");
  expect_decode_refused(rank_file(R"({"rank":0,"segments":[[0,0,2]],"elements":-1,"states":0})", 2), 0, "header elements");
  expect_decode_refused(rank_file(R"({"rank":0,"segments":[[0,0,2]],"elements":2,"states":1e300})", 2), 0, "header states");
}

// Segments that do not add up to the header's elements decoded; a begin near 2^63 made
// `begin + length` wrap in the load's bounds check and the load wrote far outside the tensor.
TEST(Checkpoint, ARankHeaderSegmentsMustCoverExactlyItsElements) {
  expect_decode_refused(rank_file(R"({"rank":0,"segments":[[0,0,7581616]],"elements":2,"states":0})", 2), 0, "header segments[0]");
  expect_decode_refused(rank_file(R"({"rank":0,"segments":[[0,0,1]],"elements":2,"states":0})", 2), 0, "cover 1 of its 2");
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_wrapping_segment");
  RankShard shard = whole_shard(0);
  shard.segments = {{0, std::numeric_limits<Elements>::max(), 1}, {0, 0, 11}, {1, 0, 5}};
  try {
    save_checkpoint(dir, two_tensors(1), shard, comm);
    load_checkpoint(resolve_checkpoint(dir));
    ADD_FAILURE() << "saved and loaded a segment that starts at 2^63 - 1";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("segments[0] length"), std::string::npos) << error.what();
  }
}

// Rewrites the manifest of the checkpoint in `dir` through `edit`.
template <typename Edit>
void edit_manifest(const fs::path& dir, Edit&& edit) {
  const fs::path file = resolve_checkpoint(dir) / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(file));
  edit(manifest);
  std::ofstream(file, std::ios::trunc) << manifest.dump(1);
}

// A shape that disagrees with numel loaded, and consolidate wrote a safetensors header whose shape
// does not describe its data.
TEST(Checkpoint, AManifestShapeMustMatchItsNumel) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_shape");
  save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  edit_manifest(dir, [](nlohmann::json& m) { m["tensors"][0]["shape"] = {3, 0}; });
  expect_refused(dir, "tensors[0] (a.weight) numel 12 differs from its shape [3,0]");
}

// Integers were read with nlohmann's get<int>(): dp_size 2^32 + 1 wrapped to 1 and loaded, and a
// float such as 3e74 for optimizer_states was undefined behaviour (UBSan: outside the range of int).
TEST(Checkpoint, AManifestIntegerOutOfRangeIsRefusedByName) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_ranges");
  save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  edit_manifest(dir, [](nlohmann::json& m) { m["dp_size"] = 4294967297LL; });
  expect_refused(dir, "dp_size must be at most 2147483647");
  edit_manifest(dir, [](nlohmann::json& m) {
    m["dp_size"] = 1;
    m["optimizer_states"] = 3e74;
  });
  expect_refused(dir, "optimizer_states must be an integer");
  edit_manifest(dir, [](nlohmann::json& m) {
    m["optimizer_states"] = 2;
    m["files"][0]["name"] = "../rank_00000.bin";
  });
  expect_refused(dir, "files[0] name must be rank_00000.bin");
}

// A manifest claiming 2^60 elements made the load allocate them (std::bad_alloc) before it read a
// rank file; now the rank files' sizes on disk bound what the tensors may claim.
TEST(Checkpoint, AManifestClaimingMoreThanItsFilesHoldIsRefusedBeforeAllocating) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_huge");
  save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  edit_manifest(dir, [](nlohmann::json& m) {
    m["tensors"][0]["shape"] = {1LL << 60};
    m["tensors"][0]["numel"] = 1LL << 60;
  });
  expect_refused(dir, "tensors claim more elements than the rank files'");
}

// --- Issue 19 (reliability): what identifies a rank file, bounded reads, the safetensors key. ---

std::vector<char> bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), std::streamsize(bytes.size()));
}

// Every manifest entry's checksum was 0x2144DF1C, the CRC-32 residue of any file that ends in its
// own CRC: a valid rank file of another run (another seed) copied into a checkpoint loaded.
TEST(Checkpoint, ARankFileFromAnotherSaveIsRefusedNamingIt) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_ours");
  const fs::path other = fresh_directory("ckpt_theirs");
  const fs::path step = save_checkpoint(dir, two_tensors(3), whole_shard(0), comm);
  const fs::path theirs = save_checkpoint(other, two_tensors(3), whole_shard(99), comm);
  fs::copy_file(theirs / "rank_00000.bin", step / "rank_00000.bin",
                fs::copy_options::overwrite_existing);
  expect_refused(dir, "rank_00000.bin: belongs to another save");
  // The same save twice (the same seed and step): still two saves, told apart.
  save_checkpoint(other, two_tensors(3), whole_shard(0), comm);
  fs::copy_file(theirs / "rank_00000.bin", step / "rank_00000.bin",
                fs::copy_options::overwrite_existing);
  expect_refused(dir, "rank_00000.bin: belongs to another save");
}

// A rank file whose payload changed and whose trailing CRC-32 was made right again (a
// self-consistent file with other content) loaded: the manifest's checksum did not depend on the
// content.
TEST(Checkpoint, AManifestChecksumThatDiffersFromTheContentIsRefused) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_resealed");
  const fs::path step = save_checkpoint(dir, two_tensors(3), whole_shard(0), comm);
  std::vector<char> bytes = bytes_of(step / "rank_00000.bin");
  bytes[bytes.size() - 8] ^= 0x40;  // a float of the last optimizer state
  std::vector<unsigned char> unsigned_bytes(bytes.begin(), bytes.end());
  const std::uint32_t crc = checkpoint_detail::crc32_of(unsigned_bytes, unsigned_bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  write_bytes(step / "rank_00000.bin", bytes);
  expect_refused(dir, "rank_00000.bin: size or checksum differs from the manifest");
}

// The header's rank was never compared with the file's name or its place in the manifest.
TEST(Checkpoint, ARankFileHoldingAnotherRanksPartitionIsRefused) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_rank_swapped");
  RankShard shard = whole_shard(0);
  shard.rank = 1;
  try {
    save_checkpoint(dir, two_tensors(3), shard, comm);
    load_checkpoint(resolve_checkpoint(dir));
    ADD_FAILURE() << "saved and loaded rank 1's partition as rank_00000.bin";
  } catch (const CheckpointError& error) {
    EXPECT_NE(
        std::string(error.what()).find("rank_00000.bin: holds rank 1's partition, not rank 0's"),
        std::string::npos)
        << error.what();
  }
}

TEST(Checkpoint, AnOlderFormatVersionIsRefusedWithAClearMessage) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_version");
  save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  edit_manifest(dir, [](nlohmann::json& m) { m["version"] = 1; });
  expect_refused(dir, "unsupported checkpoint version 1 (this zerolens reads version 2 only");
}

// In a child (a read that never ends must not take the test or the machine with it: 20 s, 1 GiB):
// exit 0 when loading `dir` is refused with a message containing `what`.
int refused_in_child(const fs::path& dir, const std::string& what) {
  ::alarm(20);
  const rlimit memory{1u << 30, 1u << 30};
  ::setrlimit(RLIMIT_AS, &memory);
  try {
    load_checkpoint(resolve_checkpoint(dir));
    return 3;
  } catch (const CheckpointError& error) {
    return std::string(error.what()).find(what) != std::string::npos ? 0 : 4;
  } catch (...) {
    return 5;
  }
}

void expect_refused_without_hanging(const fs::path& dir, const std::string& what) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(refused_in_child(dir, what));
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "expected '" << what << "'; child status " << status
      << " (exit 3: loaded, 4: another message, 5: another exception; killed by SIGALRM: it "
         "blocked or read forever)";
}

// `latest` or manifest.json as a link to /dev/zero grew memory forever; a FIFO blocked the load.
TEST(Checkpoint, LatestOrManifestThatIsADeviceOrFifoIsRefusedWithoutBlocking) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_devices");
  const fs::path step = save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  fs::remove(dir / "latest");
  fs::create_symlink("/dev/zero", dir / "latest");
  expect_refused_without_hanging(dir, "latest' is not a regular file");
  fs::remove(dir / "latest");
  std::ofstream(dir / "latest") << step.filename().string() << "\n";
  fs::remove(step / "manifest.json");
  fs::create_symlink("/dev/zero", step / "manifest.json");
  expect_refused_without_hanging(dir, "manifest.json' is not a regular file");
  fs::remove(step / "manifest.json");
  ASSERT_EQ(::mkfifo((step / "manifest.json").c_str(), 0600), 0);
  expect_refused_without_hanging(dir, "manifest.json' is not a regular file");
}

// A manifest key given twice was read as the last one (nlohmann's json::parse).
TEST(Checkpoint, AManifestKeyGivenTwiceIsRefused) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_duplicate_key");
  const fs::path step = save_checkpoint(dir, two_tensors(1), whole_shard(0), comm);
  std::string text;
  {
    std::ifstream in(step / "manifest.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.insert(text.find('{') + 1, "\"step\": 5,");
  std::ofstream(step / "manifest.json", std::ios::trunc) << text;
  expect_refused(dir, "step");
  expect_refused(dir, "twice");
  // A number past double's range is a CheckpointError too (the strict reader lets nlohmann's
  // out_of_range through; fuzz_checkpoint found it).
  text.replace(text.find("\"step\": 5,"), 10, "\"x\": 1E999,");
  std::ofstream(step / "manifest.json", std::ios::trunc) << text;
  expect_refused(dir, "invalid JSON");
}

// A model tensor named __metadata__ replaced the safetensors metadata in the header written.
TEST(Checkpoint, ATensorNamedLikeTheSafetensorsMetadataKeyIsRefused) {
  SoloCommunicator comm;
  const fs::path dir = fresh_directory("ckpt_metadata_name");
  CheckpointMeta meta = two_tensors(1);
  meta.tensors[1].name = "__metadata__";
  save_checkpoint(dir, meta, whole_shard(0), comm);
  const FullState state = load_checkpoint(resolve_checkpoint(dir));
  try {
    write_safetensors(dir / "model.safetensors", state);
    ADD_FAILURE() << "wrote a tensor named __metadata__";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("named __metadata__"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
}

}  // namespace
}  // namespace zerolens::exec
