// A whole file mapped read-only into memory (POSIX mmap), for the model loaders.
//
// Reading model.bin into a buffer and then copying each tensor out of it touched the file's
// 75 MB twice and held both copies at once: the load's peak was the file plus the weights. A
// mapping is read where a tensor is taken, once, straight into the weights, and release() then
// drops the tensor's pages from the resident set, so the load holds about one tensor of the file
// at a time. The pages stay in the OS page cache: a second run reads them from memory.
//
//   auto file = std::make_shared<const MappedFile>("model.bin");   // IoError when it cannot be mapped
//   std::span<const std::uint8_t> bytes = file->bytes();
//   file->release(p, n);   // pages wholly inside [p, p + n) leave the resident set
//
// The file must not shrink while it is mapped: reading a page past its new end raises SIGBUS,
// as with every mapped reader (the loaders take every tensor before they return).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "error.hpp"

namespace polyattn::whisper {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw IoError("cannot map '" + path + "': not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {  // mmap refuses a length of 0; an empty file is an empty span
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int mmap_errno = errno;
      ::close(fd);  // the mapping keeps the file open
      if (p == MAP_FAILED) throw IoError("cannot map " + std::to_string(size_) + " bytes of '" + path + "': " + std::strerror(mmap_errno));
      data_ = static_cast<const std::uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }

  // Drops the pages wholly inside [p, p + n), a range of bytes(), from this process's resident
  // set. The mapping is private and never written, so a later read of them faults them in from
  // the file again: this changes memory use, never contents. Pages a neighbouring range shares
  // stay.
  void release(const std::uint8_t* p, std::size_t n) const {
    static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
    const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace polyattn::whisper
