// The device data path, checked on any machine: a stand-in backend that reports Device::Cuda
// but keeps its "device memory" in host memory and runs the host kernels. Everything the CUDA
// backend's forward pass and PIC path do with memory (weights uploaded, caches, scratch and
// K/V appends in device memory, ids up and logits down, MoE list offsets down, entries
// downloaded after their prefill, entries uploaded and composed into a device cache, prefix
// snapshots copied within the device) then runs here, and must give exactly the host
// backend's results: the kernels are the same, only the memory bookkeeping differs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/forward.hpp"
#include "pic/compose.hpp"
#include "pic/engine.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"
#include "store/segment_store.hpp"

#include <unistd.h>

namespace {
namespace device_plumbing_test {
namespace kn = hypic::kernels;
namespace model = hypic::model;
using hypic::Device;
using hypic::Tensor;

using pic_test::fake_device;
using pic_test::HostMemoryDevice;

model::Model on_fake_device(const model::Model& m) {
  return model::Model(m.config(), model::to_backend(m.weights(), fake_device()), fake_device());
}

TEST(DevicePlumbing, ForwardOnADeviceCacheEqualsTheHostsExactly) {
  for (const std::string arch : {"qwen3_5", "qwen3_next"}) {  // qwen3_next: MoE on the device
    model::Model host = pic_test::remembering_tiny_host_model(arch, 3);
    model::Model dev = on_fake_device(host);
    host.set_max_block_tokens(64);
    dev.set_max_block_tokens(64);
    std::mt19937 rng(2);
    const auto ids = pic_test::random_tokens(rng, 150, host.config().vocab_size);
    auto hc = host.new_cache();
    auto dc = dev.new_cache();
    for (const model::LayerCache& lc : dc.layers)
      EXPECT_EQ((lc.kind == model::LayerKind::Linear ? lc.state : lc.k).device(), Device::Cuda);
    EXPECT_EQ(dev.prefill(ids, dc, model::LogitsMode::All).to_vector(),
              host.prefill(ids, hc, model::LogitsMode::All).to_vector())
        << arch;
    for (int32_t t : {5, 17})
      EXPECT_EQ(dev.decode_step(t, dc).to_vector(), host.decode_step(t, hc).to_vector()) << arch;
    EXPECT_EQ(dev.last_hidden(), host.last_hidden());
    auto refused = model::InferenceCache::empty(host.config());
    EXPECT_THROW(dev.prefill(ids, refused, model::LogitsMode::Last), hypic::Error);
  }
}

TEST(DevicePlumbing, EntriesComputedAndSplicedOnADeviceEqualTheHosts) {
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 7);
  model::Model dev = on_fake_device(host);
  std::mt19937 rng(11);
  const int V = host.config().vocab_size;
  const std::vector<std::vector<int32_t>> segs = {pic_test::random_tokens(rng, 40, V),
                                                  pic_test::random_tokens(rng, 70, V)};
  for (bool addition : {false, true}) {
    model::InferenceCache caches[2] = {host.new_cache(), dev.new_cache()};
    model::Model* models[2] = {&host, &dev};
    for (int i = 0; i < 2; ++i) {
      for (const auto& s : segs) {
        const hypic::pic::SegmentEntry e = hypic::pic::compute_entry(*models[i], s, 8);
        for (const auto& l : e.linear) EXPECT_EQ(l.conv.device(), Device::Host);
        hypic::pic::compose_segments(*models[i], {{&s, &e}}, addition, caches[i]);
      }
    }
    for (size_t l = 0; l < caches[0].layers.size(); ++l) {
      const model::LayerCache &a = caches[0].layers[l], &b = caches[1].layers[l];
      for (const auto& [x, y] : {std::pair{&a.state, &b.state}, std::pair{&a.conv, &b.conv},
                                 std::pair{&a.k, &b.k}, std::pair{&a.v, &b.v}})
        if (x->rank() > 0) {
          EXPECT_EQ(y->to_vector(), x->to_vector()) << "layer " << l;
        }
    }
  }
}

TEST(DevicePlumbing, EngineModesOnADeviceAnswerAsOnTheHost) {
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 5);
  model::Model dev = on_fake_device(host);
  std::mt19937 rng(4);
  const int V = host.config().vocab_size;
  hypic::pic::Query q;
  q.id = "q";
  q.segments = {pic_test::random_tokens(rng, 30, V), pic_test::random_tokens(rng, 50, V)};
  q.question = pic_test::random_tokens(rng, 6, V);
  q.max_new_tokens = 4;
  for (hypic::pic::Mode mode :
       {hypic::pic::Mode::Full, hypic::pic::Mode::Prefix, hypic::pic::Mode::Pic}) {
    hypic::pic::EngineOptions o;
    o.mode = mode;
    o.junction = hypic::pic::JunctionSpec::parse("8");
    o.keep_first_logits = true;
    hypic::pic::Engine eh(host, "fp", o), ed(dev, "fp", o);
    for (int rep = 0; rep < 2; ++rep) {  // the second query hits the memory tier / snapshots
      const hypic::pic::QueryResult rh = eh.run(q), rd = ed.run(q);
      EXPECT_EQ(rd.answer, rh.answer) << hypic::pic::mode_name(mode) << " query " << rep;
      EXPECT_EQ(rd.first_logits, rh.first_logits) << hypic::pic::mode_name(mode);
    }
  }
}

// The memory tier on a device (issue #14): an entry goes up once, through the uploader's
// staging buffers (the fake's upload_async copies only at the fence, so a splice that did not
// wait would read garbage), and every later query that hits it splices from device memory.
TEST(DevicePlumbing, HotEntriesStayOnTheDeviceAndGoUpOnce) {
  namespace pic = hypic::pic;
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 5);
  model::Model dev = on_fake_device(host);
  const HostMemoryDevice& fd = fake_device();
  std::mt19937 rng(8);
  const int V = host.config().vocab_size;
  pic::Query q;
  q.id = "q";
  const auto a = pic_test::random_tokens(rng, 60, V), b = pic_test::random_tokens(rng, 90, V);
  q.segments = {a, b, a};  // the repeat is a memory hit within the query
  q.question = pic_test::random_tokens(rng, 6, V);
  q.max_new_tokens = 3;
  pic::EngineOptions o;
  o.mode = pic::Mode::Pic;
  o.junction = pic::JunctionSpec::parse("8");
  o.keep_first_logits = true;

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hypic_devtier_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  hypic::store::StoreOptions so;
  so.model_fingerprint = "fp";
  so.junction = o.junction.store_code();
  so.dtype = hypic::DType::F32;  // no rounding: the host engine keeps no store
  auto store = hypic::store::SegmentStore::create(dir + "/s.h5", so);
  pic::Engine eh(host, "fp", o), ed(dev, "fp", o, &store);
  // Cold entries as host entries (as they come through MPI): each goes up once. Computed on
  // the device they would not go up at all (ColdEntriesComputedOnTheDeviceNeverGoUp).
  pic::LocalColdSource host_cold(host);
  ed.set_cold_source(&host_cold);
  EXPECT_EQ(eh.entries_uploaded(), 0u);

  uint64_t up0 = fd.uploaded;
  const pic::QueryResult h1 = eh.run(q), d1 = ed.run(q);
  EXPECT_EQ(d1.cold, 2);
  EXPECT_EQ(d1.hits_memory, 1);
  EXPECT_EQ(ed.entries_uploaded(), 2u);
  EXPECT_EQ(fd.uploaded - up0, ed.bytes_uploaded());
  EXPECT_EQ(ed.bytes_uploaded(), d1.cold_entry_bytes);
  EXPECT_EQ(ed.memory_bytes(), d1.cold_entry_bytes);  // the tier counts device bytes
  EXPECT_EQ(d1.answer, h1.answer);
  EXPECT_EQ(d1.first_logits, h1.first_logits);

  // Hot: nothing of an entry goes up again. What still crosses (token ids, the new cache's
  // initial states) is less than the smaller entry, which the host-entry splice would upload.
  const size_t smallest = pic::compute_entry(host, a, 8).bytes();
  up0 = fd.uploaded;
  const uint64_t h2d0 = fd.host_to_device;
  const pic::QueryResult h2 = eh.run(q), d2 = ed.run(q);
  EXPECT_EQ(d2.hits_memory, 3);
  EXPECT_EQ(fd.uploaded - up0, 0u);
  EXPECT_EQ(ed.entries_uploaded(), 2u);
  EXPECT_LT(fd.host_to_device - h2d0, smallest);
  EXPECT_EQ(d2.answer, h2.answer);
  EXPECT_EQ(d2.first_logits, h2.first_logits);

  // Store hits (read ahead and in run()) go up once each as well, and compose the same.
  pic::Engine ed2(dev, "fp", o, &store);
  ed2.queue_prefetch(q);
  EXPECT_TRUE(ed2.prefetch_one());  // the first segment read ahead, more queued
  EXPECT_EQ(ed2.prefetched(), 1u);
  EXPECT_EQ(ed2.entries_uploaded(), 1u);
  const uint64_t ahead = ed2.bytes_uploaded();
  EXPECT_GT(ahead, 0u);
  up0 = fd.uploaded;
  const pic::QueryResult d3 = ed2.run(q);
  EXPECT_EQ(d3.hits_store, 1);
  EXPECT_EQ(d3.hits_memory, 2);
  EXPECT_EQ(ed2.entries_uploaded(), 2u);
  EXPECT_EQ(fd.uploaded - up0, ed2.bytes_uploaded() - ahead);
  EXPECT_EQ(d3.answer, h1.answer);
  EXPECT_EQ(d3.first_logits, h1.first_logits);
  std::filesystem::remove_all(dir);
}

// A resident entry cannot be stored (its arrays are on the device) nor spliced by a model on
// another device: both are one clear error, not a read of the wrong memory.
TEST(DevicePlumbing, ResidentEntriesRefuseHostUses) {
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 5);
  model::Model dev = on_fake_device(host);
  std::mt19937 rng(3);
  const auto seg = pic_test::random_tokens(rng, 40, host.config().vocab_size);
  hypic::pic::EntryUploader up(fake_device());
  const hypic::pic::SegmentEntry e = up.upload(hypic::pic::compute_entry(host, seg, 8));
  EXPECT_TRUE(e.resident());
  EXPECT_EQ(e.attention.at(0).k.device(), Device::Cuda);
  EXPECT_TRUE(e.linear.at(0).summary.t.empty());
  EXPECT_THROW(hypic::pic::store_view(e), hypic::Error);
  auto hc = host.new_cache();
  EXPECT_THROW(hypic::pic::compose_segments(host, {{&seg, &e}}, false, hc), hypic::Error);
  auto dc = dev.new_cache();
  EXPECT_NO_THROW(hypic::pic::compose_segments(dev, {{&seg, &e}}, false, dc));
}

// The cold-entry round trip (issue #14): an entry computed on the device stays there. Its
// host copy (downloaded for the store only) equals the host computation bit for bit, for
// every kind of layer; and an engine on the device keeps cold entries resident with no upload.
TEST(DevicePlumbing, EntriesComputedResidentEqualTheHostsBitForBit) {
  for (const std::string arch : {"qwen3_5", "bailing_moe_linear", "kimi_linear", "minimax"}) {
    model::Model host = pic_test::remembering_tiny_host_model(arch, 9);
    model::Model dev = on_fake_device(host);
    std::mt19937 rng(12);
    const auto seg = pic_test::random_tokens(rng, 57, host.config().vocab_size);
    for (int w : {0, 8}) {
      const hypic::pic::SegmentEntry r = hypic::pic::compute_resident_entry(dev, seg, w);
      ASSERT_TRUE(r.resident()) << arch;
      for (const auto& l : r.linear) {
        EXPECT_TRUE(l.summary.s.empty() && l.summary.t.empty()) << arch << ": host arrays";
        EXPECT_EQ(l.device.s.device(), Device::Cuda);
      }
      for (const auto& a : r.attention) EXPECT_EQ(a.k.device(), Device::Cuda);
      const hypic::store::Entry want =
          hypic::pic::to_store_entry(hypic::pic::compute_entry(host, seg, w));
      const hypic::store::Entry got = hypic::pic::to_store_entry(hypic::pic::download_entry(r));
      ASSERT_EQ(got.arrays.size(), want.arrays.size()) << arch;
      for (const auto& [name, t] : want.arrays) {
        ASSERT_TRUE(got.arrays.count(name)) << arch << " " << name;
        EXPECT_EQ(got.arrays.at(name).shape(), t.shape()) << arch << " " << name;
        const std::vector<float> a = got.arrays.at(name).to_vector(), b = t.to_vector();
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << arch << " w=" << w << " " << name;
      }
      EXPECT_EQ(r.bytes(), hypic::pic::compute_entry(host, seg, w).bytes()) << arch;
    }
  }
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 9);
  EXPECT_THROW(hypic::pic::compute_resident_entry(host, {1, 2, 3}, 0), hypic::Error);
}

TEST(DevicePlumbing, ColdEntriesComputedOnTheDeviceNeverGoUp) {
  namespace pic = hypic::pic;
  model::Model host = pic_test::remembering_tiny_host_model("qwen3_5", 5);
  model::Model dev = on_fake_device(host);
  const HostMemoryDevice& fd = fake_device();
  std::mt19937 rng(8);
  const int V = host.config().vocab_size;
  pic::Query q;
  q.id = "q";
  q.segments = {pic_test::random_tokens(rng, 60, V), pic_test::random_tokens(rng, 90, V)};
  q.question = pic_test::random_tokens(rng, 6, V);
  q.max_new_tokens = 3;
  pic::EngineOptions o;
  o.mode = pic::Mode::Pic;
  o.junction = pic::JunctionSpec::parse("8");
  o.keep_first_logits = true;
  // Entries resident on a device keep T dense (docs/entry-forms.md): the host engine must too
  // for the two to agree bit for bit.
  o.entry_tolerance = "0";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hypic_devcold_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  for (const hypic::DType dt : {hypic::DType::F32, hypic::DType::BF16}) {
    hypic::store::StoreOptions so;
    so.model_fingerprint = "fp";
    so.junction = o.junction.store_code();
    so.dtype = dt;
    const std::string name = std::string(hypic::dtype_name(dt));
    auto sh = hypic::store::SegmentStore::create(dir + "/h_" + name + ".h5", so);
    auto sd = hypic::store::SegmentStore::create(dir + "/d_" + name + ".h5", so);
    pic::Engine eh(host, "fp", o, &sh), ed(dev, "fp", o, &sd);
    // The same engine fed host entries (the path before): one upload per cold entry.
    auto su = hypic::store::SegmentStore::create(dir + "/u_" + name + ".h5", so);
    pic::Engine eu(dev, "fp", o, &su);
    pic::LocalColdSource host_cold(host);
    eu.set_cold_source(&host_cold);
    const uint64_t up0 = fd.uploaded;
    const pic::QueryResult rh = eh.run(q), rd = ed.run(q);
    EXPECT_EQ(rd.cold, 2) << name;
    EXPECT_EQ(ed.entries_uploaded(), 0u) << name;
    EXPECT_EQ(fd.uploaded - up0, 0u) << name << ": nothing of a cold entry went up";
    EXPECT_EQ(ed.memory_bytes(), rd.cold_entry_bytes) << name;
    EXPECT_EQ(rd.answer, rh.answer) << name;
    EXPECT_EQ(rd.first_logits, rh.first_logits) << name;  // rounded on the device as on the host
    const pic::QueryResult ru = eu.run(q);
    EXPECT_EQ(eu.entries_uploaded(), 2u) << name;
    EXPECT_GT(eu.bytes_uploaded(), 0u) << name;
    EXPECT_EQ(ru.first_logits, rh.first_logits) << name;
    // The store holds what the host engine stored, bit for bit (downloaded for it).
    for (const std::string& key : sh.keys()) {
      const auto a = sh.get(key), b = sd.get(key);
      ASSERT_TRUE(a && b) << key;
      for (const auto& [n, t] : a->arrays)
        EXPECT_EQ(b->arrays.at(n).to_vector(), t.to_vector()) << name << " " << n;
    }
    EXPECT_EQ(sd.size(), 2u);
    // Hot now: the resident entries are hits, still nothing goes up.
    const pic::QueryResult rd2 = ed.run(q);
    EXPECT_EQ(rd2.hits_memory, 2) << name;
    EXPECT_EQ(fd.uploaded - up0, eu.bytes_uploaded()) << name;
    EXPECT_EQ(rd2.first_logits, rh.first_logits) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace device_plumbing_test
}  // namespace
