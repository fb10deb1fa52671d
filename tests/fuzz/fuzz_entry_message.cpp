// The MPI messages between ranks (cluster/messages.hpp): the first byte picks the decoder
// (entry, command, failure report), the rest is the message. What decodes must survive the
// round trip: a command serialises back to the same bytes; an entry (whose arrays may arrive
// in any order but are kept by name) to bytes that decode to an identical message.
#include <cstring>

#include "cluster/messages.hpp"
#include "fuzz_util.hpp"

using namespace hypic::cluster;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  hypic_fuzz::expect_clean([&] {
    switch (data[0] % 3) {
      case 0: {
        const EntryMessage m = deserialize_entry(body, n);
        const Bytes once = serialize_entry(m.segment, m.key, m.entry);
        const EntryMessage m2 = deserialize_entry(once.data(), once.size());
        const Bytes twice = serialize_entry(m2.segment, m2.key, m2.entry);
        if (once != twice || (m.entry.arrays.size() <= 1 && once.size() != n)) __builtin_trap();
        break;
      }
      case 1: {
        const Command c = deserialize_command(body, n);
        const Bytes again = serialize_command(c);
        if (again.size() != n || std::memcmp(again.data(), body, n) != 0) __builtin_trap();
        break;
      }
      default:
        (void)describe_failure(deserialize_failure(body, n));
    }
  });
  return 0;
}
