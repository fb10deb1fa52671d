#pragma once
// Files the commands read and the scratch files they write: an input must be a regular file
// (a folder, FIFO or device is refused before anything reads it), a read error is an error
// (never taken for the end of the file), and scratch stores live in a private folder.
#include <istream>
#include <string>

namespace hypic {

// Throws hypic::Error unless `path` names a regular file (symbolic links followed): one line
// naming `what` (e.g. "--corpus") and the path, saying whether it is missing, a folder or
// another kind of file (FIFO, character device, socket). Checked with stat(2), so a FIFO is
// refused without opening it (an open would block until a writer comes).
void require_regular_file(const std::string& path, const std::string& what);

// The whole of a regular file (require_regular_file first); a read error (EIO, ...) throws
// hypic::Error naming the path and the system's reason instead of returning what came before.
std::string read_regular_file(const std::string& path, const std::string& what);

// After a loop that read `in` until it stopped: throws hypic::Error naming `path` when the
// stream stopped on a read error (badbit) rather than at its end.
void require_read_to_end(const std::istream& in, const std::string& path);

// Throws hypic::Error unless `name` can be used as one file name inside a folder the user
// chose (e.g. eval's --dataset in OUT/<mode>/<dataset>.jsonl): 1-128 characters of letters,
// digits, '_', '-' and '.', not starting with '.', so never "..", a '/' or a hidden file.
void require_plain_name(const std::string& name, const std::string& what);

// A folder only this user can enter (mode 0700), made atomically by mkdtemp(3) under $TMPDIR
// (or /tmp) or under `parent` when one is given, with a name no other user can predict;
// removed with everything in it when the object goes (also when an error unwinds the stack).
class PrivateTempDir {
 public:
  explicit PrivateTempDir(const std::string& prefix, const std::string& parent = "");
  ~PrivateTempDir();
  PrivateTempDir(PrivateTempDir&& o) noexcept;
  PrivateTempDir& operator=(PrivateTempDir&& o) noexcept;
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;

  const std::string& path() const { return path_; }
  // Creates the empty file `name` (no '/') inside, mode 0600, with O_CREAT | O_EXCL |
  // O_NOFOLLOW: anything already there under that name (a file, folder or symbolic link) is
  // refused and left alone. Returns the file's path.
  std::string create_file(const std::string& name) const;
  // Removes the folder and everything in it (symbolic links inside are removed, never
  // followed); safe to call twice.
  void remove() noexcept;

 private:
  std::string path_;
};

}  // namespace hypic
