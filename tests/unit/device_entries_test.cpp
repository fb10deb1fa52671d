// The NCCL path of segment entries (cluster/device_entries.hpp), on any machine: the entry is
// computed resident on the stand-in device (fake_device.hpp), its arrays go through a loopback
// link (device memory of the stand-in is host memory), and MPI's part is the device-entry
// header. What the NCCL path must keep: the metadata the MPI path carries (segment, key,
// array names and shapes), and the values bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "cluster/device_entries.hpp"
#include "cluster/distributed.hpp"
#include "cluster/messages.hpp"
#include "pic/compose.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"

namespace {
namespace device_entries_test {
namespace kn = hypic::kernels;
namespace pic = hypic::pic;
using hypic::Device;
using hypic::Tensor;
using hypic::cluster::Bytes;

// Sends and receives in one process: a receive copies the oldest send's parts (the stand-in
// device's memory is host memory), checking that the sizes pair up as NCCL requires.
class LoopbackLink final : public kn::DeviceLink {
 public:
  const char* name() const override { return "loopback"; }
  uint64_t send(const std::vector<Part>& parts, int peer) override {
    sent_.push_back({parts, peer});
    return ++tickets_;
  }
  uint64_t recv(const std::vector<Part>& parts, int peer) override {
    EXPECT_FALSE(sent_.empty()) << "a receive with no send queued";
    if (sent_.empty()) return ++tickets_;
    const Sent s = sent_.front();
    sent_.pop_front();
    (void)peer;
    EXPECT_EQ(s.parts.size(), parts.size());
    for (size_t i = 0; i < parts.size() && i < s.parts.size(); ++i) {
      EXPECT_EQ(s.parts[i].bytes, parts[i].bytes) << "part " << i;
      if (s.parts[i].bytes == parts[i].bytes && parts[i].bytes > 0)
        std::memcpy(parts[i].data, s.parts[i].data, parts[i].bytes);
      bytes += parts[i].bytes;
    }
    return ++tickets_;
  }
  bool done(uint64_t) override { return true; }
  void compute_after(uint64_t) override { ++ordered; }
  void finish_compute() override {}
  uint64_t bytes = 0;    // received
  uint64_t ordered = 0;  // compute_after calls

 private:
  struct Sent {
    std::vector<Part> parts;
    int peer;
  };
  std::deque<Sent> sent_;
  uint64_t tickets_ = 0;
};

hypic::model::Model on_fake_device(const hypic::model::Model& m) {
  return hypic::model::Model(m.config(),
                             hypic::model::to_backend(m.weights(), pic_test::fake_device()),
                             pic_test::fake_device());
}

void expect_same_arrays(const hypic::store::Entry& a, const hypic::store::Entry& b,
                        const std::string& what) {
  EXPECT_EQ(a.n_tokens, b.n_tokens) << what;
  ASSERT_EQ(a.arrays.size(), b.arrays.size()) << what;
  for (const auto& [name, t] : a.arrays) {
    ASSERT_TRUE(b.arrays.count(name)) << what << ": " << name;
    const std::vector<float> x = t.to_vector(), y = b.arrays.at(name).to_vector();
    ASSERT_EQ(t.shape(), b.arrays.at(name).shape()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what << ": " << name;
  }
}

// Per architecture (delta-rule, lightning with RoPE'd state, MLA): the header's layout equals
// the MPI message's, and the arrays that arrive equal the host entry's bit for bit.
TEST(DeviceEntries, NcclPathCarriesTheMpiPathsMetadataAndValues) {
  for (const std::string arch : {"qwen3_5", "bailing_moe_linear", "kimi_linear", "minimax"}) {
    hypic::model::Model host = pic_test::remembering_tiny_host_model(arch, 3);
    hypic::model::Model dev = on_fake_device(host);
    std::mt19937 rng(5);
    const auto tokens = pic_test::random_tokens(rng, 41, host.config().vocab_size);
    for (int w : {0, 6}) {
      const std::string what = arch + " w=" + std::to_string(w);
      // The MPI path: a host entry, serialised with the worker's compute time, decoded.
      hypic::store::Entry host_arrays = pic::to_store_entry(pic::compute_entry(host, tokens, w));
      host_arrays.arrays[hypic::cluster::kComputeSecondsArray] = Tensor({1}, 0.25f);
      const Bytes message = hypic::cluster::serialize_entry(9, "key-9", host_arrays);
      const hypic::cluster::EntryMessage mpi =
          hypic::cluster::deserialize_entry(message.data(), message.size());
      // The NCCL path: computed resident, its arrays moved out as device tensors.
      hypic::store::Entry device_arrays =
          pic::take_arrays(pic::compute_resident_entry(dev, tokens, w));
      for (const auto& [name, t] : device_arrays.arrays)
        EXPECT_EQ(t.device(), Device::Cuda) << what << ": " << name;
      device_arrays.arrays[hypic::cluster::kComputeSecondsArray] = Tensor({1}, 0.25f);
      LoopbackLink link;
      std::vector<kn::DeviceLink::Part> parts;
      for (auto& [name, t] : device_arrays.arrays)
        if (t.device() != Device::Host) parts.push_back({t.raw(), t.bytes()});
      link.send(parts, 0);
      const Bytes header = hypic::cluster::serialize_device_header(9, "key-9", device_arrays);
      EXPECT_LT(header.size(), 4096u) << what << ": the header carries no array values";
      hypic::cluster::DeviceEntryHeader h =
          hypic::cluster::deserialize_device_header(header.data(), header.size());
      EXPECT_EQ(h.host.arrays.size(), 1u) << what;  // the compute time only
      const hypic::store::Entry received =
          hypic::cluster::receive_device_arrays(pic_test::fake_device(), link, std::move(h), 1);
      EXPECT_EQ(link.ordered, 1u) << what << ": later compute must wait for the receive";
      EXPECT_EQ(hypic::cluster::layout_of(9, "key-9", received),
                hypic::cluster::layout_of(mpi.segment, mpi.key, mpi.entry))
          << what;
      expect_same_arrays(received, mpi.entry, what);
    }
  }
}

// The resident entry that arrives composes as the host entry does (the splice reads device
// memory only), and a host-computing rank 0 refuses device entries with one clear error.
TEST(DeviceEntries, ReceivedEntryIsResidentAndComposesAsTheHostEntry) {
  hypic::model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 4);
  hypic::model::Model dev = on_fake_device(host);
  std::mt19937 rng(6);
  const auto seg = pic_test::random_tokens(rng, 50, host.config().vocab_size);
  const auto prefix = pic_test::random_tokens(rng, 9, host.config().vocab_size);
  hypic::store::Entry arrays = pic::take_arrays(pic::compute_resident_entry(dev, seg, 8));
  LoopbackLink link;
  std::vector<kn::DeviceLink::Part> parts;
  for (auto& [name, t] : arrays.arrays) parts.push_back({t.raw(), t.bytes()});
  link.send(parts, 0);
  const Bytes header = hypic::cluster::serialize_device_header(0, "k", arrays);
  hypic::store::Entry got = hypic::cluster::receive_device_arrays(
      pic_test::fake_device(), link,
      hypic::cluster::deserialize_device_header(header.data(), header.size()), 1);
  const pic::SegmentEntry resident = pic::from_store_entry(std::move(got), dev.config(), 8);
  ASSERT_TRUE(resident.resident());
  const pic::SegmentEntry on_host = pic::compute_entry(host, seg, 8);
  auto dc = dev.new_cache();
  auto hc = host.new_cache();
  dev.prefill(prefix, dc, hypic::model::LogitsMode::None);
  host.prefill(prefix, hc, hypic::model::LogitsMode::None);
  pic::compose_segments(dev, {{&seg, &resident}}, false, dc);
  pic::compose_segments(host, {{&seg, &on_host}}, false, hc);
  for (size_t l = 0; l < hc.layers.size(); ++l)
    for (const auto& [d, h] : {std::pair{&dc.layers[l].state, &hc.layers[l].state},
                               std::pair{&dc.layers[l].k, &hc.layers[l].k}})
      if (h->rank() > 0) {
        EXPECT_EQ(d->to_vector(), h->to_vector()) << "layer " << l;
      }

  hypic::cluster::DeviceEntryHeader h2 =
      hypic::cluster::deserialize_device_header(header.data(), header.size());
  EXPECT_THROW(hypic::cluster::receive_device_arrays(kn::host_backend(), link, std::move(h2), 1),
               hypic::Error);
}

TEST(DeviceEntries, HeaderRejectsDamage) {
  hypic::store::Entry e;
  e.n_tokens = 3;
  e.arrays["a"] = Tensor({2, 2}, 1.0f).to(Device::Cuda, &pic_test::fake_device());
  e.arrays["b"] = Tensor({1}, 2.0f);
  const Bytes good = hypic::cluster::serialize_device_header(4, "kk", e);
  const auto h = hypic::cluster::deserialize_device_header(good.data(), good.size());
  EXPECT_EQ(h.device.segment, 4);
  EXPECT_EQ(h.device.key, "kk");
  EXPECT_EQ(h.device.n_tokens, 3);
  ASSERT_EQ(h.device.arrays.size(), 1u);
  EXPECT_EQ(h.device.arrays[0].name, "a");
  EXPECT_EQ(h.device.arrays[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(h.host.arrays.at("b").to_vector(), std::vector<float>{2.0f});
  for (size_t cut : {size_t(0), size_t(3), good.size() / 2, good.size() - 1})
    EXPECT_THROW(hypic::cluster::deserialize_device_header(good.data(), cut), hypic::Error) << cut;
  Bytes foreign = good;
  foreign[0] ^= 0xff;
  EXPECT_THROW(hypic::cluster::deserialize_device_header(foreign.data(), foreign.size()),
               hypic::Error);
  // An MPI entry message is not a device header, nor the reverse.
  const Bytes entry = hypic::cluster::serialize_entry(4, "kk", hypic::store::Entry{});
  EXPECT_THROW(hypic::cluster::deserialize_device_header(entry.data(), entry.size()), hypic::Error);
  EXPECT_THROW(hypic::cluster::deserialize_entry(good.data(), good.size()), hypic::Error);
}

TEST(DeviceEntries, TasksSayWhichPathTheirEntryTakes) {
  for (bool to_device : {false, true}) {
    hypic::cluster::Task t{3, "k", {1, 2, 3}, 1, to_device};
    const Bytes b = hypic::cluster::serialize_command(t);
    const auto back =
        std::get<hypic::cluster::Task>(hypic::cluster::deserialize_command(b.data(), b.size()));
    EXPECT_EQ(back.to_device, to_device);
    EXPECT_EQ(back.tokens, t.tokens);
  }
}

}  // namespace device_entries_test
}  // namespace
