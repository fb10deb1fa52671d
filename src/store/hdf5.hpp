#pragma once
// A small RAII layer over the HDF5 C API. Every hid_t lives in a move-only Handle that
// closes it in its destructor; every failing HDF5 call becomes a hypic::Error that names
// the file, the object and HDF5's own innermost reason. HDF5's automatic printing of its
// error stack to stderr is switched off the first time this layer is used.
//
// Not thread-safe: the HDF5 library here is built without its global lock, so one thread
// at a time may call into it.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hypic/error.hpp"

namespace hypic::h5 {

using Shape = std::vector<hsize_t>;
inline constexpr hsize_t kUnlimited = H5S_UNLIMITED;

// Turns off HDF5's printing of its error stack; called by every constructor below, so
// callers rarely need it. Idempotent.
void silence_errors();

// Writes HDF5 cannot complete (EFBIG past `ulimit -f`, ENOSPC). HDF5 keeps what it could not
// write in its caches and fails on it again at every later flush and close of that file. A
// close that fails leaves the object registered under its id although HDF5 has already freed
// it (H5I_dec_ref keeps the id when the close callback fails; H5F__dest frees the file
// anyway), and the library's teardown at exit (H5close, or MPI_Finalize for parallel HDF5)
// then closes it again and crashes (in H5F__close_cb). So every dataset and file of a
// writable file is flushed before it is closed here, and when that flush fails the file's
// descriptor is pointed at /dev/null: HDF5 then drops the writes it still holds and every
// object of the file closes cleanly. The file on disk stays as the last write that completed
// left it, as after a kill -9 at that moment (which a store survives by design). Reads of
// that file fail from then on (the descriptor is write-only), instead of seeing zeros.
//
// Only if a close fails all the same (a driver other than the default sec2, whose descriptor
// cannot be redirected; a close that had to read the file back) is it noted here; main then
// ends the process without HDF5's teardown.
void note_unreleased_object();
bool unreleased_object_seen();

// Owns one hid_t and the function that closes it. Move-only.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns false when HDF5 reported an error while closing.
  bool reset();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// HDF5 memory type for a C++ element type.
template <typename T>
hid_t native_type();
template <>
inline hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
inline hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
inline hid_t native_type<int8_t>() {
  return H5T_NATIVE_INT8;
}
template <>
inline hid_t native_type<uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
inline hid_t native_type<uint16_t>() {
  return H5T_NATIVE_UINT16;
}
template <>
inline hid_t native_type<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
inline hid_t native_type<uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
inline hid_t native_type<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t native_type<uint64_t>() {
  return H5T_NATIVE_UINT64;
}

// Standard little-endian file type for a C++ element type (what is written to disk).
template <typename T>
hid_t file_type();

enum class Access { kReadOnly, kReadWrite };

struct FileOptions {
  // When set, the file is opened with the MPI-IO driver; create/open are then collective
  // over this communicator, as are the creation of objects and attributes.
  MPI_Comm comm = MPI_COMM_NULL;
  // Newest on-disk format (H5F_LIBVER_LATEST); required for SWMR writing.
  bool latest_format = false;
  // Open for single-writer/multiple-reader reading (read-only access only).
  bool swmr_read = false;
  // Open straight into SWMR writing (read-write access and latest_format only). Unlike
  // File::start_swmr_write(), which always sets 100 metadata read attempts, this keeps
  // metadata_read_attempts.
  bool swmr_write = false;
  // Clear the "file is open for writing" flags a killed SWMR writer leaves behind (what the
  // h5clear tool does). Only for a file the caller knows no live process is writing.
  bool clear_status_flags = false;
  // How often HDF5 re-reads a piece of metadata whose checksum fails before giving up;
  // 0 keeps HDF5's default (1, or 100 with a pause between tries for SWMR reading, which
  // only helps while a live writer is changing the file).
  unsigned metadata_read_attempts = 0;
};

struct DatasetOptions {
  Shape chunk;            // empty: contiguous layout (then max_shape must be empty)
  Shape max_shape;        // empty: same as the shape; kUnlimited marks an extendible dimension
  int deflate_level = 0;  // 0: no compression (needs chunk)
  bool allocate_early = false;   // allocate the storage at creation (contiguous datasets)
  size_t chunk_cache_bytes = 0;  // 0: HDF5's default (1 MiB per dataset)
};

// Something that can carry attributes: a file's root group, a group or a dataset.
class Object {
 public:
  hid_t id() const { return handle_.id(); }
  bool valid() const { return handle_.valid(); }
  const std::string& file_name() const { return file_; }
  const std::string& path() const { return path_; }  // object path inside the file

  bool has_attribute(const std::string& name) const;
  // Creates or replaces a scalar attribute.
  void set_string_attribute(const std::string& name, const std::string& value);
  void set_int_attribute(const std::string& name, int64_t value);
  void set_double_attribute(const std::string& name, double value);
  std::string string_attribute(const std::string& name) const;
  int64_t int_attribute(const std::string& name) const;
  double double_attribute(const std::string& name) const;

  // Throws hypic::Error "HDF5: <doing> '<path>' in '<file>': <HDF5's reason>".
  [[noreturn]] void fail(const std::string& doing) const;

 protected:
  Object() = default;
  Object(Handle handle, std::string file, std::string path)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)) {}
  std::string child_path(const std::string& name) const;

  Handle handle_;
  std::string file_;
  std::string path_;
};

class Dataset : public Object {
 public:
  Dataset() = default;

  Shape shape() const;
  hsize_t element_count() const;
  // The dataset's on-disk element type (a copy the caller owns).
  Handle stored_type() const;
  // True when the stored type is of the same class, size and signedness as T.
  template <typename T>
  bool holds() const;

  // Changes the extent (grow up to max_shape, or shrink); chunked datasets only.
  void resize(const Shape& shape);

  template <typename T>
  void write(const T* data) {
    write_raw(native_type<T>(), {}, {}, data);
  }
  template <typename T>
  void read(T* data) const {
    read_raw(native_type<T>(), {}, {}, data);
  }
  template <typename T>
  std::vector<T> read_all() const {
    std::vector<T> out(element_count());
    if (!out.empty()) read(out.data());
    return out;
  }
  // A hyperslab: `count` elements per dimension starting at `offset`, dense in memory.
  template <typename T>
  void write_slab(const Shape& offset, const Shape& count, const T* data) {
    write_raw(native_type<T>(), offset, count, data);
  }
  template <typename T>
  void read_slab(const Shape& offset, const Shape& count, T* data) const {
    read_raw(native_type<T>(), offset, count, data);
  }
  // Same with an explicit memory type (compound rows, 16-bit floats kept as raw bits).
  // Empty offset and count mean the whole dataset.
  void write_raw(hid_t mem_type, const Shape& offset, const Shape& count, const void* data);
  void read_raw(hid_t mem_type, const Shape& offset, const Shape& count, void* data) const;

 private:
  friend class Location;
  Dataset(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path)) {}
  bool holds_type(hid_t mem_type) const;
  Handle selection(const Shape& offset, const Shape& count, Handle& mem_space) const;
};

class Group;

// A file or a group: something that holds named groups and datasets.
class Location : public Object {
 public:
  // Names may be paths ("a/b/c"); missing intermediate groups are created.
  Group create_group(const std::string& name);
  Group open_group(const std::string& name) const;
  // True when every component of the path exists.
  bool exists(const std::string& name) const;

  template <typename T>
  Dataset create_dataset(const std::string& name, const Shape& shape,
                         const DatasetOptions& options = {}) {
    return create_dataset(name, file_type<T>(), shape, options);
  }
  Dataset create_dataset(const std::string& name, hid_t stored_type, const Shape& shape,
                         const DatasetOptions& options = {});
  Dataset open_dataset(const std::string& name, size_t chunk_cache_bytes = 0) const;

 protected:
  Location() = default;
  Location(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path)) {}
};

class Group : public Location {
 public:
  Group() = default;

 private:
  friend class Location;
  Group(Handle handle, std::string file, std::string path)
      : Location(std::move(handle), std::move(file), std::move(path)) {}
};

class File : public Location {
 public:
  File() = default;
  // Creates the file, replacing any existing one.
  static File create(const std::string& path, const FileOptions& options = {});
  static File open(const std::string& path, Access access, const FileOptions& options = {});

  // Writes every cached piece of metadata and raw data to the file (not an fsync).
  void flush();
  // Switches an open read-write file (latest_format) into SWMR writing mode. After this,
  // no new objects or attributes may be created; datasets may still grow and be written.
  void start_swmr_write();
  // Closes now and reports a failure (the destructor closes silently).
  void close();
  hsize_t size_bytes() const;
  Access access() const { return access_; }

 private:
  File(Handle handle, std::string file, std::string path)
      : Location(std::move(handle), std::move(file), std::move(path)) {}
  Access access_ = Access::kReadOnly;
};

// Element type of a file type T: IEEE float, signed or unsigned integer of sizeof(T).
template <typename T>
bool Dataset::holds() const {
  return holds_type(file_type<T>());
}

template <>
inline hid_t file_type<float>() {
  return H5T_IEEE_F32LE;
}
template <>
inline hid_t file_type<double>() {
  return H5T_IEEE_F64LE;
}
template <>
inline hid_t file_type<int8_t>() {
  return H5T_STD_I8LE;
}
template <>
inline hid_t file_type<uint8_t>() {
  return H5T_STD_U8LE;
}
template <>
inline hid_t file_type<uint16_t>() {
  return H5T_STD_U16LE;
}
template <>
inline hid_t file_type<int32_t>() {
  return H5T_STD_I32LE;
}
template <>
inline hid_t file_type<uint32_t>() {
  return H5T_STD_U32LE;
}
template <>
inline hid_t file_type<int64_t>() {
  return H5T_STD_I64LE;
}
template <>
inline hid_t file_type<uint64_t>() {
  return H5T_STD_U64LE;
}

// A float32 array read back from a file, row-major.
struct F32Array {
  Shape shape;
  std::vector<float> data;
};

// Writes one float32 dataset `name` (a path; groups are created) of the given shape into a
// new file at `path`, replacing the file if it exists.
void write_f32_dataset(const std::string& path, const std::string& name, const float* data,
                       std::vector<hsize_t> shape);
// Reads a float32 dataset (any stored float or integer type is converted to float32).
F32Array read_f32_dataset(const std::string& path, const std::string& name);

}  // namespace hypic::h5
