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

}  // namespace
