// The NVMe store: round trips of random data of odd sizes and addresses (checked against the file
// read back with plain iostreams), many requests in flight, and every error path: read before
// write, short reads, a missing or unusable directory, a full disk and a file size limit, each
// naming the path and the errno text and keeping the previous version of the object.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "exec/io/nvme_io.hpp"
#include "exec/memory/memory_ledger.hpp"

namespace zerolens::exec {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "zerolens-nvme-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::byte> random_bytes(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<std::byte> bytes(count);
  for (auto& byte : bytes) byte = std::byte(generator() & 0xff);
  return bytes;
}

// The file as plain iostreams see it: an independent path to the bytes on disk.
std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::vector<std::string> directory_entries(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(path))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Appending (rather than "o" + ...) avoids a false -Wrestrict of GCC 12.
std::string object_name(int index) {
  std::string name = "o";
  name += std::to_string(index);
  return name;
}

NvmeOptions small_pieces() {
  NvmeOptions options;
  options.block_size = 64 * 1024;  // several pieces per object even for small test data
  options.queue_depth = 4;
  return options;
}

TEST(NvmeStore, RoundTripsOddSizesFromAlignedAndUnalignedMemory) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  MemoryLedger ledger;
  const std::vector<std::size_t> sizes = {0,    1,     4095,          4096,
                                          4097, 65536, 65536 * 3 + 5, (1 << 20) + 12345};
  std::uint64_t seed = 1;
  for (const std::size_t size : sizes) {
    for (const std::size_t misalignment : {std::size_t{0}, std::size_t{1}, std::size_t{100}}) {
      const auto data = random_bytes(size, seed++);
      TrackedBuffer<std::byte> source(ledger, Device::Cpu, Component::NvmeSwapBuffers,
                                      size + misalignment, 4096);
      std::memcpy(source.data() + misalignment, data.data(), size);
      const std::string name = "obj-" + std::to_string(size) + "-" + std::to_string(misalignment);
      store.write(name, std::span<const std::byte>(source.data() + misalignment, size));
      EXPECT_EQ(store.size_of(name), Bytes(size)) << name;
      EXPECT_TRUE(same(file_bytes(store.path_of(name)), data)) << name;

      TrackedBuffer<std::byte> target(ledger, Device::Cpu, Component::NvmeSwapBuffers,
                                      size + misalignment, 4096);
      store.read(name, std::span<std::byte>(target.data() + misalignment, size));
      EXPECT_TRUE(same(std::span<const std::byte>(target.data() + misalignment, size), data))
          << name;
    }
  }
}

TEST(NvmeStore, ReadsAnyRangeAtAnyOffset) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  const auto data = random_bytes((1 << 20) + 777, 42);
  store.write("w", data);
  const std::vector<std::pair<std::size_t, std::size_t>> ranges = {{0, 10},
                                                                   {1, 4095},
                                                                   {4095, 2},
                                                                   {4096, 4096},
                                                                   {100000, 200003},
                                                                   {65536, 65536 * 2},
                                                                   {data.size() - 1, 1},
                                                                   {5, data.size() - 5},
                                                                   {data.size(), 0}};
  for (const auto& [offset, length] : ranges) {
    std::vector<std::byte> part(length);
    store.read("w", part, Bytes(offset));
    EXPECT_TRUE(same(part, std::span(data).subspan(offset, length))) << offset << "+" << length;
  }
}

TEST(NvmeStore, ManyRequestsInFlightAndCountersPerDirection) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  constexpr int kObjects = 48;
  std::vector<std::vector<std::byte>> data;
  std::vector<NvmeTicket> tickets;
  Bytes total = 0;
  for (int i = 0; i < kObjects; ++i) {
    data.push_back(random_bytes(std::size_t(i) * 9973 + 1, std::uint64_t(100 + i)));
    total += Bytes(data.back().size());
  }
  for (int i = 0; i < kObjects; ++i)
    tickets.push_back(store.write_async(object_name(i), data[std::size_t(i)]));
  for (const auto ticket : tickets) store.wait(ticket);
  std::vector<std::vector<std::byte>> back(kObjects);
  tickets.clear();
  for (int i = 0; i < kObjects; ++i) {
    back[std::size_t(i)].resize(data[std::size_t(i)].size());
    tickets.push_back(store.read_async(object_name(i), back[std::size_t(i)]));
  }
  store.wait_all();
  for (int i = 0; i < kObjects; ++i)
    EXPECT_TRUE(same(back[std::size_t(i)], data[std::size_t(i)])) << i;
  const NvmeCounters counters = store.counters();
  EXPECT_EQ(counters.bytes_written, total);
  EXPECT_EQ(counters.bytes_read, total);
  EXPECT_EQ(counters.writes, kObjects);
  EXPECT_EQ(counters.reads, kObjects);
  EXPECT_THROW(store.wait(tickets.front()), std::invalid_argument);  // already waited by wait_all
}

// The I/O thread keeps the queue full on its own: a request of many pieces completes while the
// caller computes (here: sleeps) without calling wait(), which is what overlap needs.
TEST(NvmeStore, ProgressesWhileTheCallerDoesSomethingElse) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  EXPECT_EQ(store.staging_bytes(), 4 * 64 * 1024);
  const auto data = random_bytes(4 << 20, 9);  // 64 pieces, 4 in flight at a time
  const NvmeTicket ticket = store.write_async("overlap", data);
  for (int i = 0; i < 30000 && !store.done(ticket); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(store.done(ticket));
  store.wait(ticket);
  EXPECT_TRUE(same(file_bytes(store.path_of("overlap")), data));
}

TEST(NvmeStore, OverwriteReplacesTheObjectAndLeavesNoTemporaryFiles) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  for (const std::size_t size : {300000, 5000, 70000}) store.write("a", random_bytes(size, size));
  EXPECT_TRUE(same(file_bytes(store.path_of("a")), random_bytes(70000, 70000)));
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"a"});
  store.remove("a");
  EXPECT_FALSE(store.contains("a"));
  store.remove("a");  // absent: not an error
}

// Swap files: a write of the same size goes into the existing file (the same inode, so no new
// file and no rename), a write of another size still replaces the object.
TEST(NvmeStore, InPlaceOverwriteKeepsTheFileWhenTheSizeIsUnchanged) {
  TempDir dir;
  NvmeOptions options = small_pieces();
  options.overwrite_in_place = true;
  NvmeStore store(dir.path(), options);
  const auto inode_of = [&](const std::string& name) {
    struct stat info {};
    EXPECT_EQ(::stat(store.path_of(name).c_str(), &info), 0);
    return info.st_ino;
  };
  store.write("a", random_bytes(70000, 1));
  const auto first = inode_of("a");
  store.write("a", random_bytes(70000, 2));
  EXPECT_EQ(inode_of("a"), first);
  EXPECT_TRUE(same(file_bytes(store.path_of("a")), random_bytes(70000, 2)));
  store.write("a", random_bytes(5000, 3));  // another size: a new file renamed over the old one
  EXPECT_TRUE(same(file_bytes(store.path_of("a")), random_bytes(5000, 3)));
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"a"});
  EXPECT_EQ(store.counters().bytes_written, 70000 + 70000 + 5000);
}

TEST(NvmeStore, BufferedModeWhenAsked) {
  TempDir dir;
  NvmeOptions options = small_pieces();
  options.direct = false;
  NvmeStore store(dir.path(), options);
  EXPECT_EQ(store.mode(), NvmeMode::Buffered);
  EXPECT_FALSE(store.mode_reason().empty());
  const auto data = random_bytes(200001, 7);
  store.write("b", data);
  std::vector<std::byte> back(data.size());
  store.read("b", back);
  EXPECT_TRUE(same(back, data));
}

TEST(NvmeStore, ReadBeforeWriteNamesThePathAndErrno) {
  TempDir dir;
  NvmeStore store(dir.path());
  std::vector<std::byte> buffer(100);
  try {
    store.read_async("never-written", buffer);
    FAIL() << "reading an object never written must throw";
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), ENOENT);
    EXPECT_EQ(error.path(), dir.path() + "/never-written");
    EXPECT_NE(std::string(error.what()).find("No such file or directory"), std::string::npos)
        << error.what();
  }
}

TEST(NvmeStore, ReadingPastTheEndIsAShortReadError) {
  TempDir dir;
  NvmeStore store(dir.path(), small_pieces());
  const auto data = random_bytes(10000, 3);
  store.write("s", data);
  std::vector<std::byte> buffer(20000);
  EXPECT_THROW(store.read("s", buffer), NvmeError);
  std::vector<std::byte> tail(2000);
  try {
    store.read("s", tail, 9000);
    FAIL() << "bytes 9000..11000 of a 10000-byte object must not read";
  } catch (const NvmeError& error) {
    EXPECT_NE(std::string(error.what()).find("short read: the object holds 10000 bytes"),
              std::string::npos)
        << error.what();
    EXPECT_EQ(error.path(), store.path_of("s"));
  }
  std::vector<std::byte> inside(5000);
  store.read("s", inside, 5000);  // the store is still usable, and the last byte is reachable
  EXPECT_TRUE(same(inside, std::span(data).subspan(5000)));
}

TEST(NvmeStore, MissingOrUnusableDirectoryIsAClearError) {
  TempDir dir;
  const std::string missing = dir.path() + "/does-not-exist";
  try {
    NvmeStore store(missing);
    FAIL();
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.path(), missing);
    EXPECT_NE(std::string(error.what()).find("No such file or directory"), std::string::npos)
        << error.what();
  }
  // A path under a regular file cannot hold files, even for root (chmod does not stop root).
  const std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "x";
  try {
    NvmeStore store(file + "/sub");
    FAIL();
  } catch (const NvmeError& error) {
    EXPECT_EQ(error.error_number(), ENOTDIR);
    EXPECT_NE(std::string(error.what()).find("Not a directory"), std::string::npos) << error.what();
  }
  EXPECT_THROW(NvmeStore store(file), NvmeError);
}

TEST(NvmeStore, RejectsBadOptionsNamesAndTickets) {
  TempDir dir;
  NvmeOptions options;
  options.block_size = 1000;
  EXPECT_THROW(NvmeStore(dir.path(), options), std::invalid_argument);
  options = NvmeOptions{};
  options.queue_depth = 0;
  EXPECT_THROW(NvmeStore(dir.path(), options), std::invalid_argument);
  NvmeStore store(dir.path());
  const std::vector<std::byte> data(10);
  for (const char* name : {"", ".hidden", "../escape", "a/b", "sp ace"}) {
    EXPECT_THROW(store.write_async(name, data), std::invalid_argument) << name;
  }
  EXPECT_THROW(store.wait(NvmeTicket{12345}), std::invalid_argument);
  const NvmeTicket ticket = store.write_async("ok", data);
  store.wait(ticket);
  EXPECT_THROW(store.wait(ticket), std::invalid_argument);
}

// Runs `body` in a child process (its own limits, signals and mount namespace); returns what it
// printed and its exit code. 77 means the environment refused the setup.
struct ChildResult {
  int exit_code = -1;
  std::string output;
};

ChildResult run_in_child(const std::function<int(std::string&)>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string output;
    int code = 1;
    try {
      code = body(output);
    } catch (const std::exception& error) {
      output += std::string("unexpected exception: ") + error.what();
    }
    const ssize_t written = ::write(pipe_fds[1], output.data(), output.size());
    ::_exit(written == ssize_t(output.size()) ? code : 1);
  }
  ::close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0)
    result.output.append(buffer, std::size_t(got));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  return bool(file);
}

// A private mount namespace (a user namespace too when not root) where a tiny tmpfs can be mounted.
bool mount_tmpfs(const std::string& where, const char* size, unsigned long flags) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWNS | (uid == 0 ? 0 : CLONE_NEWUSER)) != 0) return false;
  if (uid != 0 && !(write_file("/proc/self/setgroups", "deny") &&
                    write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") &&
                    write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))) {
    return false;
  }
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  return ::mount("tmpfs", where.c_str(), "tmpfs", flags, (std::string("size=") + size).c_str()) ==
         0;
}

std::string error_text(const std::function<void()>& action) {
  try {
    action();
  } catch (const NvmeError& error) {
    return "errno=" + std::to_string(error.error_number()) + " " + error.what();
  }
  return "no error";
}

TEST(NvmeStore, FullDiskFailsEarlyOrInWaitAndKeepsThePreviousVersion) {
  TempDir dir;
  const ChildResult child = run_in_child([&](std::string& out) {
    if (!mount_tmpfs(dir.path(), "1m", 0)) return 77;
    const auto version1 = random_bytes(256 * 1024, 1);
    const auto too_big = random_bytes(4 << 20, 2);
    NvmeOptions options = small_pieces();
    {
      NvmeStore store(dir.path(), options);
      store.write("keep", version1);
      out += "early: " + error_text([&] { store.write_async("keep", too_big); }) + "\n";
    }
    options.preallocate = false;  // no reservation: the kernel refuses a piece in flight instead
    NvmeStore store(dir.path(), options);
    out += "late: " + error_text([&] { store.write("keep", too_big); }) + "\n";
    std::vector<std::byte> back(version1.size());
    store.read("keep", back);
    out += std::string("intact: ") + (same(back, version1) ? "yes" : "no") + "\n";
    out += "entries:";
    for (const auto& name : directory_entries(dir.path())) out += " " + name;
    return 0;
  });
  if (child.exit_code == 77) GTEST_SKIP() << "no private mount namespace for a small tmpfs here";
  ASSERT_EQ(child.exit_code, 0) << child.output;
  const std::string enospc = "errno=" + std::to_string(ENOSPC) + " " + dir.path() + "/keep: ";
  EXPECT_NE(child.output.find("early: " + enospc), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("late: " + enospc), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("No space left on device\nlate"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("intact: yes"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("entries: keep"), std::string::npos) << child.output;
  EXPECT_EQ(child.output.find(".partial"), std::string::npos) << child.output;
}

TEST(NvmeStore, ReadOnlyFilesystemIsRefusedAtConstruction) {
  TempDir dir;
  const ChildResult child = run_in_child([&](std::string& out) {
    if (!mount_tmpfs(dir.path(), "1m", MS_RDONLY)) return 77;
    out += error_text([&] { NvmeStore store(dir.path()); });
    return 0;
  });
  if (child.exit_code == 77)
    GTEST_SKIP() << "no private mount namespace for a read-only tmpfs here";
  ASSERT_EQ(child.exit_code, 0) << child.output;
  EXPECT_NE(child.output.find("errno=" + std::to_string(EROFS) + " " + dir.path() + ": "),
            std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("Read-only file system"), std::string::npos) << child.output;
}

// RLIMIT_FSIZE binds root too: the piece that crosses the limit comes back short, the store
// resumes it and the kernel then refuses with EFBIG.
TEST(NvmeStore, FileSizeLimitMidWriteIsAnErrorInWait) {
  TempDir dir;
  const ChildResult child = run_in_child([&](std::string& out) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{(1 << 20) + 8192, RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 77;
    NvmeOptions options = small_pieces();
    options.preallocate = false;
    options.queue_depth = 1;  // pieces in order: the one crossing the limit fails first
    NvmeStore store(dir.path(), options);
    const auto data = random_bytes(2 << 20, 5);
    out += error_text([&] { store.write("big", data); }) + "\n";
    out += std::string("exists: ") + (store.contains("big") ? "yes" : "no");
    return 0;
  });
  ASSERT_EQ(child.exit_code, 0) << child.output;
  EXPECT_NE(child.output.find("errno=" + std::to_string(EFBIG) + " " + dir.path() +
                              "/big: write failed at byte " + std::to_string((1 << 20) + 8192)),
            std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("File too large"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("exists: no"), std::string::npos) << child.output;
}

}  // namespace
}  // namespace zerolens::exec
