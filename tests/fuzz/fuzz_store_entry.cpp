// A store entry as the file holds it (store/entry.hpp decode_entry): an array directory, its
// names and a payload, as read_row passes them once the index row has been checked. Layout of
// the input: u8 dtype, u8 number of names, u8 number of rows, i64 n_tokens, u64
// payload_offset, then the names (u8 length + bytes), the rows (sizeof(ArrayRecord) each),
// then the payload.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "store/entry_record.hpp"

using namespace hypic::store;

namespace {
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool take(void* out, size_t n) {
    if (n > size_ - at_) return false;
    std::memcpy(out, data_ + at_, n);
    at_ += n;
    return true;
  }
  const uint8_t* rest() const { return data_ + at_; }
  size_t rest_size() const { return size_ - at_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  uint8_t kind = 0, n_names = 0, n_rows = 0;
  int64_t n_tokens = 0;
  uint64_t payload_offset = 0;
  if (!in.take(&kind, 1) || !in.take(&n_names, 1) || !in.take(&n_rows, 1) ||
      !in.take(&n_tokens, 8) || !in.take(&payload_offset, 8))
    return 0;
  const hypic::DType dtype = kind % 3 == 0   ? hypic::DType::F32
                             : kind % 3 == 1 ? hypic::DType::BF16
                                             : hypic::DType::F16;
  std::vector<std::string> names;
  for (uint8_t i = 0; i < n_names; ++i) {
    uint8_t len = 0;
    if (!in.take(&len, 1)) return 0;
    std::string name(len, '\0');
    if (!in.take(name.data(), len)) return 0;
    names.push_back(std::move(name));
  }
  std::vector<ArrayRecord> dir(n_rows);
  for (ArrayRecord& row : dir)
    if (!in.take(&row, sizeof(row))) return 0;
  // The store reads the payload into its own (aligned) buffer of whole elements.
  const size_t element = hypic::dtype_size(dtype);
  const uint64_t payload_count = in.rest_size() / element;
  std::vector<unsigned char> payload(in.rest(), in.rest() + payload_count * element);
  Entry entry;
  const std::string problem = decode_entry(n_tokens, dir, names, dtype, payload.data(),
                                           payload_offset, payload_count, entry);
  if (problem.empty()) {
    // Each array it returns holds what its shape says, read from inside the payload.
    for (const auto& [name, t] : entry.arrays)
      if (static_cast<uint64_t>(t.numel()) != hypic::Tensor::count(t.shape()) ||
          static_cast<uint64_t>(t.numel()) > payload_count)
        __builtin_trap();
  }
  return 0;
}
