#include "store/hdf5.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace hypic::h5 {

namespace {
std::atomic<bool> unreleased_object{false};
}  // namespace

void note_unreleased_object() {
  unreleased_object.store(true);
}

bool unreleased_object_seen() {
  return unreleased_object.load();
}

namespace {

bool writable_file(hid_t file) {
  unsigned intent = 0;
  return H5Fget_intent(file, &intent) >= 0 && (intent & H5F_ACC_RDWR) != 0;
}

// Points the descriptor of `file` at /dev/null (hdf5.hpp: writes HDF5 cannot complete).
// False when it cannot (not the sec2 driver).
bool discard_pending_writes(hid_t file) {
  hid_t fapl = H5Fget_access_plist(file);
  if (fapl < 0) return false;
  void* handle = nullptr;
  const bool sec2 = H5Pget_driver(fapl) == H5FD_SEC2 &&
                    H5Fget_vfd_handle(file, fapl, &handle) >= 0 && handle != nullptr;
  H5Pclose(fapl);
  if (!sec2) return false;
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0) return false;
  const bool ok = ::dup2(null_fd, *static_cast<int*>(handle)) >= 0;
  ::close(null_fd);
  return ok;
}

// Closes an object of a file that may hold writes HDF5 cannot complete (hdf5.hpp). Returns
// -1 when those writes were dropped (the object is closed all the same) or the close failed.
herr_t close_flushed(hid_t object, herr_t (*flush)(hid_t), herr_t (*close)(hid_t)) {
  bool flushed = true;
  hid_t file = H5Iget_file_id(object);  // one more reference: closing it never closes the file
  if (file >= 0) {
    if (writable_file(file) && flush(object) < 0) {
      flushed = false;
      if (!discard_pending_writes(file)) {
        // Closing would write HDF5's pending metadata wherever it still fits in the file,
        // which can leave it unreadable; leave the object open (the teardown is skipped).
        H5Fclose(file);
        note_unreleased_object();
        return -1;
      }
    }
    H5Fclose(file);
  }
  if (close(object) < 0) {
    note_unreleased_object();
    return -1;
  }
  return flushed ? 0 : -1;
}

herr_t close_dataset(hid_t id) {
  return close_flushed(id, H5Dflush, H5Dclose);
}

herr_t close_file(hid_t id) {
  return close_flushed(
      id, [](hid_t f) { return H5Fflush(f, H5F_SCOPE_LOCAL); }, H5Fclose);
}

// The innermost (most specific) description on HDF5's error stack, then clears it.
std::string hdf5_reason() {
  std::string reason;
  auto take_innermost = [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
    auto* text = static_cast<std::string*>(out);
    if (n == 0 && err->desc != nullptr) *text = err->desc;
    if (n == 0 && text->empty()) {
      char minor[256] = {0};
      if (H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor)) > 0) *text = minor;
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  for (char& c : reason)  // some reasons hold line breaks: keep the message on one line
    if (c == '\n' || c == '\r') c = ' ';
  return reason.empty() ? std::string("no reason given by HDF5") : reason;
}

[[noreturn]] void fail_at(const std::string& doing, const std::string& object,
                          const std::string& file) {
  std::string message = "HDF5: " + doing;
  if (object.empty()) {
    message += " '" + file + "': ";
  } else {
    message += " '" + object + "' in '" + file + "': ";
  }
  message += hdf5_reason();
  throw Error(message);
}

Handle make_plist(hid_t cls, const std::string& file) {
  hid_t id = H5Pcreate(cls);
  if (id < 0) fail_at("cannot create a property list for", "", file);
  return Handle(id, H5Pclose);
}

Handle file_access_plist(const std::string& path, const FileOptions& options) {
  Handle fapl = make_plist(H5P_FILE_ACCESS, path);
  if (options.comm != MPI_COMM_NULL) {
    if (H5Pset_fapl_mpio(fapl.id(), options.comm, MPI_INFO_NULL) < 0 ||
        H5Pset_all_coll_metadata_ops(fapl.id(), true) < 0 ||
        H5Pset_coll_metadata_write(fapl.id(), true) < 0)
      fail_at("cannot set up MPI-IO access for", "", path);
  }
  if (options.latest_format &&
      H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
    fail_at("cannot select the latest file format for", "", path);
  if (options.clear_status_flags) {
    // The property h5clear sets; it is registered on every file access list.
    hbool_t clear = true;
    if (H5Pset(fapl.id(), "clear_status_flags", &clear) < 0)
      fail_at("cannot request clearing the status flags of", "", path);
  }
  if (options.metadata_read_attempts > 0 &&
      H5Pset_metadata_read_attempts(fapl.id(), options.metadata_read_attempts) < 0)
    fail_at("cannot set the metadata read attempts for", "", path);
  return fapl;
}

std::string join(const std::string& parent, const std::string& name) {
  if (!name.empty() && name.front() == '/') return name;
  if (parent.empty() || parent == "/") return "/" + name;
  return parent + "/" + name;
}

std::string shape_text(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Handle make_space(const Shape& shape, const Shape& max_shape, const std::string& file,
                  const std::string& object) {
  hid_t id = shape.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(shape.size()), shape.data(),
                                              max_shape.empty() ? nullptr : max_shape.data());
  if (id < 0)
    fail_at("cannot make a dataspace of shape " + shape_text(shape) + " for", object, file);
  return Handle(id, H5Sclose);
}

// Variable-length UTF-8 string type (h5py reads it as str).
Handle vlen_string_type() {
  hid_t id = H5Tcopy(H5T_C_S1);
  H5Tset_size(id, H5T_VARIABLE);
  H5Tset_cset(id, H5T_CSET_UTF8);
  return Handle(id, H5Tclose);
}

}  // namespace

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

bool Handle::reset() {
  bool ok = true;
  if (id_ >= 0 && closer_ != nullptr) ok = closer_(id_) >= 0;
  id_ = -1;
  return ok;
}

// ---- Object: attributes ----

void Object::fail(const std::string& doing) const {
  fail_at(doing, path_, file_);
}

std::string Object::child_path(const std::string& name) const {
  return join(path_, name);
}

bool Object::has_attribute(const std::string& name) const {
  htri_t found = H5Aexists(id(), name.c_str());
  if (found < 0) fail("cannot look for attribute '" + name + "' on");
  return found > 0;
}

namespace {

void write_scalar_attribute(const Object& object, const std::string& name, hid_t stored_type,
                            hid_t mem_type, const void* value) {
  if (object.has_attribute(name) && H5Adelete(object.id(), name.c_str()) < 0)
    object.fail("cannot replace attribute '" + name + "' on");
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  hid_t attr =
      H5Acreate2(object.id(), name.c_str(), stored_type, space.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0) object.fail("cannot create attribute '" + name + "' on");
  Handle owner(attr, H5Aclose);
  if (H5Awrite(attr, mem_type, value) < 0) object.fail("cannot write attribute '" + name + "' on");
}

Handle open_attribute(const Object& object, const std::string& name) {
  if (!object.has_attribute(name)) {
    throw Error("HDF5: attribute '" + name + "' is missing on '" + object.path() + "' in '" +
                object.file_name() + "'");
  }
  hid_t attr = H5Aopen(object.id(), name.c_str(), H5P_DEFAULT);
  if (attr < 0) object.fail("cannot open attribute '" + name + "' on");
  return Handle(attr, H5Aclose);
}

}  // namespace

void Object::set_string_attribute(const std::string& name, const std::string& value) {
  Handle type = vlen_string_type();
  const char* text = value.c_str();
  write_scalar_attribute(*this, name, type.id(), type.id(), &text);
}

void Object::set_int_attribute(const std::string& name, int64_t value) {
  write_scalar_attribute(*this, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void Object::set_double_attribute(const std::string& name, double value) {
  write_scalar_attribute(*this, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

std::string Object::string_attribute(const std::string& name) const {
  Handle attr = open_attribute(*this, name);
  Handle type(H5Aget_type(attr.id()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.id()) != H5T_STRING)
    throw Error("HDF5: attribute '" + name + "' on '" + path_ + "' in '" + file_ +
                "' is not a string");
  htri_t variable = H5Tis_variable_str(type.id());
  if (variable > 0) {
    Handle mem = vlen_string_type();
    char* text = nullptr;
    if (H5Aread(attr.id(), mem.id(), &text) < 0) fail("cannot read attribute '" + name + "' on");
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  size_t size = H5Tget_size(type.id());
  std::string value(size, '\0');
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.id(), size);
  if (H5Aread(attr.id(), mem.id(), value.data()) < 0)
    fail("cannot read attribute '" + name + "' on");
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  return value;
}

int64_t Object::int_attribute(const std::string& name) const {
  Handle attr = open_attribute(*this, name);
  int64_t value = 0;
  if (H5Aread(attr.id(), H5T_NATIVE_INT64, &value) < 0)
    fail("cannot read attribute '" + name + "' as an integer on");
  return value;
}

double Object::double_attribute(const std::string& name) const {
  Handle attr = open_attribute(*this, name);
  double value = 0;
  if (H5Aread(attr.id(), H5T_NATIVE_DOUBLE, &value) < 0)
    fail("cannot read attribute '" + name + "' as a number on");
  return value;
}

// ---- Location: groups and datasets ----

Group Location::create_group(const std::string& name) {
  Handle lcpl = make_plist(H5P_LINK_CREATE, file_);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  hid_t id = H5Gcreate2(this->id(), name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) fail_at("cannot create group", child_path(name), file_);
  return Group(Handle(id, H5Gclose), file_, child_path(name));
}

Group Location::open_group(const std::string& name) const {
  hid_t id = H5Gopen2(this->id(), name.c_str(), H5P_DEFAULT);
  if (id < 0) fail_at("cannot open group", child_path(name), file_);
  return Group(Handle(id, H5Gclose), file_, child_path(name));
}

bool Location::exists(const std::string& name) const {
  std::string prefix = (!name.empty() && name.front() == '/') ? "/" : "";
  size_t start = prefix.size();
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (end > start) {
      if (!prefix.empty() && prefix.back() != '/') prefix += '/';
      prefix += name.substr(start, end - start);
      htri_t found = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
      if (found < 0) fail_at("cannot look up", child_path(prefix), file_);
      if (found == 0) return false;
    }
    start = end + 1;
  }
  return true;
}

Dataset Location::create_dataset(const std::string& name, hid_t stored_type, const Shape& shape,
                                 const DatasetOptions& options) {
  const std::string object = child_path(name);
  HYPIC_REQUIRE(options.max_shape.empty() || options.max_shape.size() == shape.size(),
                "HDF5: dataset '" + object + "' in '" + file_ + "': max shape " +
                    shape_text(options.max_shape) + " does not match the rank of shape " +
                    shape_text(shape));
  HYPIC_REQUIRE(options.chunk.empty() || options.chunk.size() == shape.size(),
                "HDF5: dataset '" + object + "' in '" + file_ + "': chunk " +
                    shape_text(options.chunk) + " does not match the rank of shape " +
                    shape_text(shape));
  HYPIC_REQUIRE(!options.chunk.empty() || (options.max_shape.empty() && options.deflate_level == 0),
                "HDF5: dataset '" + object + "' in '" + file_ +
                    "': an extendible or compressed dataset needs a chunk shape");
  Handle space = make_space(shape, options.max_shape, file_, object);
  Handle lcpl = make_plist(H5P_LINK_CREATE, file_);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle dcpl = make_plist(H5P_DATASET_CREATE, file_);
  if (!options.chunk.empty() &&
      H5Pset_chunk(dcpl.id(), static_cast<int>(options.chunk.size()), options.chunk.data()) < 0)
    fail_at("cannot set chunk shape " + shape_text(options.chunk) + " for", object, file_);
  if (options.deflate_level > 0 && H5Pset_deflate(dcpl.id(), options.deflate_level) < 0)
    fail_at("cannot enable compression for", object, file_);
  if (options.allocate_early && H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY) < 0)
    fail_at("cannot request early allocation for", object, file_);
  Handle dapl = make_plist(H5P_DATASET_ACCESS, file_);
  if (options.chunk_cache_bytes > 0)
    H5Pset_chunk_cache(dapl.id(), 12421, options.chunk_cache_bytes, 1.0);
  hid_t id = H5Dcreate2(this->id(), name.c_str(), stored_type, space.id(), lcpl.id(), dcpl.id(),
                        dapl.id());
  if (id < 0) fail_at("cannot create dataset", object, file_);
  return Dataset(Handle(id, close_dataset), file_, object);
}

Dataset Location::open_dataset(const std::string& name, size_t chunk_cache_bytes) const {
  Handle dapl = make_plist(H5P_DATASET_ACCESS, file_);
  if (chunk_cache_bytes > 0) H5Pset_chunk_cache(dapl.id(), 12421, chunk_cache_bytes, 1.0);
  hid_t id = H5Dopen2(this->id(), name.c_str(), dapl.id());
  if (id < 0) fail_at("cannot open dataset", child_path(name), file_);
  return Dataset(Handle(id, close_dataset), file_, child_path(name));
}

// ---- Dataset ----

Shape Dataset::shape() const {
  Handle space(H5Dget_space(id()), H5Sclose);
  if (!space.valid()) fail("cannot get the dataspace of");
  int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) fail("cannot get the rank of");
  Shape dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr) < 0)
    fail("cannot get the shape of");
  return dims;
}

hsize_t Dataset::element_count() const {
  hsize_t n = 1;
  for (hsize_t d : shape()) n *= d;
  return n;
}

Handle Dataset::stored_type() const {
  hid_t type = H5Dget_type(id());
  if (type < 0) fail("cannot get the element type of");
  return Handle(type, H5Tclose);
}

bool Dataset::holds_type(hid_t wanted) const {
  Handle type = stored_type();
  H5T_class_t cls = H5Tget_class(type.id());
  if (cls != H5Tget_class(wanted) || H5Tget_size(type.id()) != H5Tget_size(wanted)) return false;
  if (cls == H5T_INTEGER) return H5Tget_sign(type.id()) == H5Tget_sign(wanted);
  return true;
}

void Dataset::resize(const Shape& new_shape) {
  if (H5Dset_extent(id(), new_shape.data()) < 0)
    fail("cannot resize to " + shape_text(new_shape) + " dataset");
}

Handle Dataset::selection(const Shape& offset, const Shape& count, Handle& mem_space) const {
  Shape dims = shape();
  if (offset.size() != dims.size() || count.size() != dims.size())
    throw Error("HDF5: a selection of rank " + std::to_string(offset.size()) +
                " does not match dataset '" + path_ + "' of shape " + shape_text(dims) + " in '" +
                file_ + "'");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (offset[i] + count[i] > dims[i])
      throw Error("HDF5: selection at " + shape_text(offset) + " of " + shape_text(count) +
                  " lies outside dataset '" + path_ + "' of shape " + shape_text(dims) + " in '" +
                  file_ + "'");
  }
  Handle file_space(H5Dget_space(id()), H5Sclose);
  if (!file_space.valid() || H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, offset.data(),
                                                 nullptr, count.data(), nullptr) < 0)
    fail("cannot select a hyperslab of");
  mem_space = make_space(count, {}, file_, path_);
  return file_space;
}

void Dataset::write_raw(hid_t mem_type, const Shape& offset, const Shape& count, const void* data) {
  if (offset.empty() && count.empty()) {
    if (H5Dwrite(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      fail("cannot write dataset");
    return;
  }
  for (hsize_t c : count)
    if (c == 0) return;
  Handle mem_space;
  Handle file_space = selection(offset, count, mem_space);
  if (H5Dwrite(id(), mem_type, mem_space.id(), file_space.id(), H5P_DEFAULT, data) < 0)
    fail("cannot write a hyperslab of dataset");
}

void Dataset::read_raw(hid_t mem_type, const Shape& offset, const Shape& count, void* data) const {
  if (offset.empty() && count.empty()) {
    if (H5Dread(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      fail("cannot read dataset");
    return;
  }
  for (hsize_t c : count)
    if (c == 0) return;
  Handle mem_space;
  Handle file_space = selection(offset, count, mem_space);
  if (H5Dread(id(), mem_type, mem_space.id(), file_space.id(), H5P_DEFAULT, data) < 0)
    fail("cannot read a hyperslab of dataset");
}

// ---- File ----

File File::create(const std::string& path, const FileOptions& options) {
  silence_errors();
  Handle fapl = file_access_plist(path, options);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) fail_at("cannot create file", "", path);
  File file(Handle(id, close_file), path, "/");
  file.access_ = Access::kReadWrite;
  return file;
}

File File::open(const std::string& path, Access access, const FileOptions& options) {
  silence_errors();
  Handle fapl = file_access_plist(path, options);
  unsigned flags = access == Access::kReadWrite ? H5F_ACC_RDWR : H5F_ACC_RDONLY;
  if (options.swmr_read) {
    HYPIC_REQUIRE(access == Access::kReadOnly,
                  "HDF5: '" + path + "': SWMR reading needs read-only access");
    flags |= H5F_ACC_SWMR_READ;
  }
  if (options.swmr_write) {
    HYPIC_REQUIRE(
        access == Access::kReadWrite && options.latest_format,
        "HDF5: '" + path + "': SWMR writing needs read-write access and the latest format");
    flags |= H5F_ACC_SWMR_WRITE;
  }
  hid_t id = H5Fopen(path.c_str(), flags, fapl.id());
  if (id < 0) {
    fail_at(access == Access::kReadWrite ? "cannot open for writing the file"
                                         : "cannot open for reading the file",
            "", path);
  }
  File file(Handle(id, close_file), path, "/");
  file.access_ = access;
  return file;
}

void File::flush() {
  if (H5Fflush(id(), H5F_SCOPE_LOCAL) < 0) fail_at("cannot flush file", "", file_);
}

void File::start_swmr_write() {
  if (H5Fstart_swmr_write(id()) < 0) fail_at("cannot start SWMR writing on file", "", file_);
}

void File::close() {
  // Flushed here first: the close itself drops what cannot be written (close_flushed), and
  // the reason would be gone from HDF5's error stack.
  if (valid() && access_ == Access::kReadWrite && H5Fflush(id(), H5F_SCOPE_LOCAL) < 0) {
    const std::string reason = hdf5_reason();
    handle_.reset();
    throw Error("HDF5: cannot write the rest of file '" + file_ + "': " + reason +
                "; it holds what was written before");
  }
  if (!handle_.reset()) fail_at("error while closing file", "", file_);
}

hsize_t File::size_bytes() const {
  hsize_t size = 0;
  if (H5Fget_filesize(id(), &size) < 0) fail_at("cannot get the size of file", "", file_);
  return size;
}

// ---- helpers ----

void write_f32_dataset(const std::string& path, const std::string& name, const float* data,
                       std::vector<hsize_t> shape) {
  File file = File::create(path);
  Dataset dataset = file.create_dataset<float>(name, shape);
  hsize_t n = 1;
  for (hsize_t d : shape) n *= d;
  if (n > 0) dataset.write(data);
  file.close();
}

F32Array read_f32_dataset(const std::string& path, const std::string& name) {
  File file = File::open(path, Access::kReadOnly);
  Dataset dataset = file.open_dataset(name);
  F32Array out;
  out.shape = dataset.shape();
  out.data = dataset.read_all<float>();
  return out;
}

}  // namespace hypic::h5
