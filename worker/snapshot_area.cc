#include "worker/snapshot_area.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace elastrun::worker {
namespace {

constexpr char kMagic[16] = "ELASTRUN-SNAP";
constexpr uint32_t kVersion = 1;
enum SlotState : uint32_t { kEmpty = 0, kWriting = 1, kValid = 2 };

// The first kHeaderBytes of a slot file. Only `state` is read by another
// process while this one may write (a restarted worker reading what a killed
// one left), so it alone is atomic: the other fields are written before the
// release store of kValid and read after its acquire load.
struct Header {
  char magic[16];
  uint32_t version;
  std::atomic<uint32_t> state;
  int64_t key;
  uint64_t sequence;
  uint64_t payload_size;
  uint32_t meta_size;
  uint32_t reserved;
  char meta[SnapshotArea::kMaxMetaBytes];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the slot state is shared between processes, so it must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == 4 && offsetof(Header, state) == 20,
              "the header layout is a file format");
static_assert(sizeof(Header) <= SnapshotArea::kHeaderBytes);

Header* HeaderOf(char* base) { return reinterpret_cast<Header*>(base); }

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "elastrun: SnapshotArea: %s\n", what);
  std::abort();
}

// An allocation failure: ResourceExhausted when memory or space ran out (the
// caller falls back to another tier), else Internal.
absl::Status AllocationError(const std::string& where, const std::string& path,
                             size_t bytes, int err) {
  std::string message = absl::StrCat(
      "cannot allocate ", bytes, " bytes of snapshot memory in ", where,
      path.empty() ? "" : absl::StrCat(" (", path, ")"), ": ", strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; free space there or make its tmpfs larger"));
    case ENOMEM:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; the machine is out of memory"));
    case EFBIG:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; the file size limit (ulimit -f) is too small"));
    default:
      return absl::InternalError(message);
  }
}

// Opens or creates a slot file that only this uid can use.
absl::StatusOr<int> OpenSlotFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          "snapshot slot file ", path, " is a symbolic link; refusing to follow it (the ",
          "snapshot folder should hold only regular files made by elastrun)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open snapshot slot file ", path, ": ", strerror(errno)));
  }
  struct stat st;
  std::string problem;
  if (fstat(fd, &st) != 0) {
    problem = absl::StrCat("cannot stat it: ", strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    problem = "it is not a regular file";
  } else if (st.st_uid != geteuid()) {
    problem =
        absl::StrCat("it is owned by uid ", st.st_uid, ", not by this process's uid ",
                     geteuid(), "; another user's snapshot is never used");
  } else if ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0) {
    problem = absl::StrCat("cannot make it private (mode 0600): ", strerror(errno));
  }
  if (!problem.empty()) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("refusing snapshot slot file ", path, ": ", problem));
  }
  return fd;
}

// Keeps a slot's mapping out of children the process forks (a data loader
// worker, a helper before its exec): they would otherwise share the live
// snapshot memory, able to write into it, and copy its page tables at every
// fork. A child sees the range unmapped.
absl::Status KeepFromChildren(const std::string& where, const std::string& path, char* base,
                              size_t bytes) {
  if (madvise(base, bytes, MADV_DONTFORK) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "cannot keep ", bytes, " bytes of snapshot memory in ", where,
      path.empty() ? "" : absl::StrCat(" (", path, ")"),
      " from forked children (madvise MADV_DONTFORK): ", strerror(errno)));
}

size_t FileSize(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotArea>> SnapshotArea::Open(
    const std::string& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot area name '", name, "' must be a plain file name such as rank0"));
  }
  const std::string where =
      dir.empty() ? absl::StrCat("anonymous memory for ", name) : dir;
  std::unique_ptr<SnapshotArea> area(new SnapshotArea(where));
  absl::MutexLock lock(&area->mu_);
  uint64_t highest = 0;
  for (int i = 0; i < 2; ++i) {
    Slot& slot = area->slots_[i];
    const std::string file = absl::StrCat(name, ".slot", i);
    if (dir.empty()) {
      slot.fd =
          memfd_create(absl::StrCat("elastrun-snapshot-", file).c_str(), MFD_CLOEXEC);
      if (slot.fd < 0) return AllocationError(where, "", kHeaderBytes, errno);
    } else {
      slot.path = absl::StrCat(dir, "/", file);
      ASSIGN_OR_RETURN(slot.fd, OpenSlotFile(slot.path));
    }
    // A new (or truncated) file gets its header allocated; its zeros read as
    // kEmpty.
    size_t size = FileSize(slot.fd);
    if (size < kHeaderBytes) {
      const int err = posix_fallocate(slot.fd, 0, kHeaderBytes);
      if (err != 0) return AllocationError(where, slot.path, kHeaderBytes, err);
      size = kHeaderBytes;
    }
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, slot.fd, 0);
    if (base == MAP_FAILED) return AllocationError(where, slot.path, size, errno);
    slot.base = static_cast<char*>(base);
    slot.mapped = size;
    RETURN_IF_ERROR(KeepFromChildren(where, slot.path, slot.base, size));
    const Header* header = HeaderOf(slot.base);
    if (memcmp(header->magic, kMagic, sizeof kMagic) == 0 &&
        header->version == kVersion) {
      highest = std::max(highest, header->sequence);
    }
  }
  area->next_sequence_ = highest + 1;
  return area;
}

SnapshotArea::~SnapshotArea() {
  for (Slot& slot : slots_) {
    if (slot.base != nullptr) munmap(slot.base, slot.mapped);
    if (slot.fd >= 0) close(slot.fd);
  }
}

std::optional<SnapshotSlot> SnapshotArea::ReadSlot(int i) const {
  const Slot& slot = slots_[i];
  const Header* header = HeaderOf(slot.base);
  if (header->state.load(std::memory_order_acquire) != kValid) return std::nullopt;
  // A file left by an older or foreign writer is checked before it is
  // trusted: its sizes must fit what is mapped.
  if (memcmp(header->magic, kMagic, sizeof kMagic) != 0 || header->version != kVersion ||
      header->payload_size > slot.mapped - kHeaderBytes ||
      header->meta_size > kMaxMetaBytes) {
    return std::nullopt;
  }
  SnapshotSlot out;
  out.index = i;
  out.key = header->key;
  out.sequence = header->sequence;
  out.meta.assign(header->meta, header->meta_size);
  out.bytes = absl::string_view(slot.base + kHeaderBytes, header->payload_size);
  return out;
}

int SnapshotArea::NewestLocked() const {
  int newest = -1;
  uint64_t newest_sequence = 0;
  for (int i = 0; i < 2; ++i) {
    std::optional<SnapshotSlot> slot = ReadSlot(i);
    if (slot.has_value() && (newest < 0 || slot->sequence > newest_sequence)) {
      newest = i;
      newest_sequence = slot->sequence;
    }
  }
  return newest;
}

std::vector<SnapshotSlot> SnapshotArea::Valid() const {
  absl::MutexLock lock(&mu_);
  std::vector<SnapshotSlot> valid;
  for (int i = 0; i < 2; ++i) {
    if (std::optional<SnapshotSlot> slot = ReadSlot(i)) valid.push_back(std::move(*slot));
  }
  std::sort(valid.begin(), valid.end(), [](const SnapshotSlot& a, const SnapshotSlot& b) {
    return a.sequence > b.sequence;
  });
  return valid;
}

absl::Status SnapshotArea::GrowLocked(int i, size_t bytes) {
  Slot& slot = slots_[i];
  // Allocating now (rather than letting the file grow sparse) is what turns a
  // full tmpfs into an error here instead of a SIGBUS in the caller's memcpy.
  const int err = posix_fallocate(slot.fd, static_cast<off_t>(slot.mapped),
                                  static_cast<off_t>(bytes - slot.mapped));
  if (err != 0) return AllocationError(where_, slot.path, bytes, err);
  // Only this slot moves; the other one (maybe pinned) keeps its address.
  void* base = mremap(slot.base, slot.mapped, bytes, MREMAP_MAYMOVE);
  if (base == MAP_FAILED) return AllocationError(where_, slot.path, bytes, errno);
  slot.base = static_cast<char*>(base);
  slot.mapped = bytes;
  // The grown part is new to the mapping (and the kernel may have moved it):
  // the whole range again.
  return KeepFromChildren(where_, slot.path, slot.base, bytes);
}

absl::StatusOr<char*> SnapshotArea::BeginWrite(size_t size) {
  absl::MutexLock lock(&mu_);
  if (writing_ >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a snapshot write in ", where_,
                     " is already in progress; Commit or Abort it first"));
  }
  const int newest = NewestLocked();
  int free_slot = -1;
  for (int i = 0; i < 2 && free_slot < 0; ++i) {
    if (i != newest && i != pinned_) free_slot = i;
  }
  if (free_slot < 0) {
    return absl::UnavailableError(absl::StrCat(
        "no free snapshot slot in ", where_,
        ": one holds the newest snapshot and the other is pinned by its persister"));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (size > SIZE_MAX - kHeaderBytes - page) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a snapshot of ", size, " bytes does not fit in memory (", where_, ")"));
  }
  const size_t need = (kHeaderBytes + size + page - 1) / page * page;
  if (slots_[free_slot].mapped < need) RETURN_IF_ERROR(GrowLocked(free_slot, need));

  Header* header = HeaderOf(slots_[free_slot].base);
  header->state.store(kWriting, std::memory_order_seq_cst);
  // The caller's payload stores must not move above the store of kWriting:
  // a process killed in its memcpy has to leave this slot marked invalid.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  memcpy(header->magic, kMagic, sizeof kMagic);
  header->version = kVersion;
  writing_ = free_slot;
  writing_size_ = size;
  return slots_[free_slot].base + kHeaderBytes;
}

void SnapshotArea::Commit(int64_t key, absl::string_view meta) {
  absl::MutexLock lock(&mu_);
  if (writing_ < 0) Die("Commit without a BeginWrite (or after Abort/Clear)");
  if (meta.size() > kMaxMetaBytes)
    Die("Commit with meta longer than kMaxMetaBytes (1024)");
  Header* header = HeaderOf(slots_[writing_].base);
  header->key = key;
  header->sequence = next_sequence_++;
  header->payload_size = writing_size_;
  header->meta_size = static_cast<uint32_t>(meta.size());
  memcpy(header->meta, meta.data(), meta.size());
  // Publishes the payload and the fields above, for this process's readers
  // and for a process that opens the file after this one died.
  header->state.store(kValid, std::memory_order_release);
  writing_ = -1;
}

void SnapshotArea::Abort() {
  absl::MutexLock lock(&mu_);
  if (writing_ < 0) return;
  HeaderOf(slots_[writing_].base)->state.store(kEmpty, std::memory_order_release);
  writing_ = -1;
}

std::optional<SnapshotSlot> SnapshotArea::PinNewest() {
  absl::MutexLock lock(&mu_);
  if (pinned_ >= 0) return std::nullopt;
  const int newest = NewestLocked();
  if (newest < 0) return std::nullopt;
  pinned_ = newest;
  return ReadSlot(newest);
}

void SnapshotArea::Unpin() {
  absl::MutexLock lock(&mu_);
  pinned_ = -1;
}

void SnapshotArea::Clear() {
  absl::MutexLock lock(&mu_);
  for (Slot& slot : slots_)
    HeaderOf(slot.base)->state.store(kEmpty, std::memory_order_release);
  writing_ = -1;
}

}  // namespace elastrun::worker
