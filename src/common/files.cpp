#include "common/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "hypic/error.hpp"

namespace hypic {
namespace fs = std::filesystem;

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(what + " " + path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(what + " " + path + " is " + file_kind(st.st_mode) + ", not a regular file");
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw Error(what + " " + path + ": cannot open: " + std::strerror(errno));
  std::string text;
  std::vector<char> buf(1 << 16);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) text.append(buf.data(), n);
  const int err = std::ferror(f) ? errno : 0;
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    throw Error(what + " " + path + ": read error after " + std::to_string(text.size()) +
                " bytes: " + (err != 0 ? std::strerror(err) : "I/O error"));
  return text;
}

void require_read_to_end(const std::istream& in, const std::string& path) {
  if (in.bad()) {
    const int err = errno;
    throw Error(path + ": read error before the end of the file (" +
                (err != 0 ? std::strerror(err) : "I/O error") + ")");
  }
}

void require_plain_name(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.');
  if (!ok)
    throw Error(what + " '" + name +
                "' is used in a file name: use 1-128 letters, digits, '_', '-' or '.' (not "
                "starting with '.', no '/')");
}

PrivateTempDir::PrivateTempDir(const std::string& prefix, const std::string& parent) {
  fs::path base;
  if (!parent.empty()) {
    base = parent;
  } else {
    std::error_code ec;
    base = fs::temp_directory_path(ec);  // $TMPDIR (or TMP, TEMP, TEMPDIR), else /tmp
    if (ec) throw Error("no folder for temporary files: " + ec.message() + " (check $TMPDIR)");
  }
  std::string tmpl = (base / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)  // mode 0700, a fresh name, or failure
    throw Error("cannot make a private temporary folder in " + base.string() + ": " +
                std::strerror(errno));
  path_ = tmpl;
}

PrivateTempDir::~PrivateTempDir() {
  remove();
}

PrivateTempDir::PrivateTempDir(PrivateTempDir&& o) noexcept : path_(std::move(o.path_)) {
  o.path_.clear();
}

PrivateTempDir& PrivateTempDir::operator=(PrivateTempDir&& o) noexcept {
  if (this != &o) {
    remove();
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

std::string PrivateTempDir::create_file(const std::string& name) const {
  HYPIC_REQUIRE(!path_.empty(), "the private temporary folder was removed");
  HYPIC_REQUIRE(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                "temporary file name '" + name + "' must be a plain file name");
  const std::string file = path_ + "/" + name;
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create temporary file " + file + ": " + std::strerror(errno));
  ::close(fd);
  return file;
}

void PrivateTempDir::remove() noexcept {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  path_.clear();
}

}  // namespace hypic
