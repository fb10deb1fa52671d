// The warm-up throughput model (cluster/warmup_sim.hpp): which stage bounds a single writer
// and per-node writers, and the scaling target of issue 46 at the Qwen3.5-35B-A3B entry size.
#include <gtest/gtest.h>

#include "cluster/warmup_sim.hpp"
#include "hypic/error.hpp"

namespace {
namespace warmup_sim_test {
using hypic::cluster::simulate_warmup_per_node_writers;
using hypic::cluster::simulate_warmup_single_writer;
using hypic::cluster::WarmupSimConfig;

WarmupSimConfig qwen35_a3b(int nodes, int workers) {
  WarmupSimConfig c;
  c.nodes = nodes;
  c.workers_per_node = workers;
  c.segment_s = 0.04;
  c.entry_bytes = 70e6;  // about one 512-token entry of that shape
  c.link_Bps = 25e9;
  c.writer_Bps = 1.5e9;
  return c;
}

TEST(WarmupSim, OneNodeOneWorkerIsComputeBoundWhenTheWriterKeepsUp) {
  WarmupSimConfig c = qwen35_a3b(1, 1);
  c.segment_s = 1.0;  // 70 MB/s of entries: far below every link
  const auto s = simulate_warmup_single_writer(c);
  EXPECT_EQ(s.bound, "compute");
  EXPECT_DOUBLE_EQ(s.entries_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.bytes_per_s, 70e6);
  EXPECT_EQ(simulate_warmup_per_node_writers(c).bound, "compute");
}

TEST(WarmupSim, SingleWriterSaturatesAndPerNodeWritersScale) {
  const double one_node = simulate_warmup_per_node_writers(qwen35_a3b(1, 8)).entries_per_s;
  const auto single = simulate_warmup_single_writer(qwen35_a3b(64, 8));
  const auto shards = simulate_warmup_per_node_writers(qwen35_a3b(64, 8));
  // One writer: 1.5 GB/s of 70 MB entries, whatever the node count.
  EXPECT_EQ(single.bound, "one writer");
  EXPECT_NEAR(single.entries_per_s, 1.5e9 / 70e6, 1e-9);
  // The target: 64 nodes with per-node writers >= 0.8 x 64 x one node's.
  EXPECT_GE(shards.entries_per_s, 0.8 * 64 * one_node);
  EXPECT_GT(shards.entries_per_s, 20 * single.entries_per_s);
}

TEST(WarmupSim, RankZeroLinkBoundsASingleWriterWithAFastDisk) {
  WarmupSimConfig c = qwen35_a3b(4, 8);
  c.writer_Bps = 100e9;
  const auto s = simulate_warmup_single_writer(c);
  EXPECT_EQ(s.bound, "rank 0 link");
  // Three of four nodes send through the link: 25 GB/s carries 4/3 x 25 GB/s of entries.
  EXPECT_NEAR(s.bytes_per_s, 25e9 * 4.0 / 3.0, 1.0);
}

TEST(WarmupSim, NodeStorageAndFileSystemCapPerNodeWriters) {
  WarmupSimConfig c = qwen35_a3b(2, 8);
  c.node_storage_Bps = 5e9;  // 8 writers x 1.5 GB/s would be 12
  auto s = simulate_warmup_per_node_writers(c);
  EXPECT_EQ(s.bound, "node storage link");
  EXPECT_NEAR(s.bytes_per_s, 10e9, 1.0);
  c.fs_Bps = 6e9;
  s = simulate_warmup_per_node_writers(c);
  EXPECT_EQ(s.bound, "file system");
  EXPECT_NEAR(s.bytes_per_s, 6e9, 1.0);
}

TEST(WarmupSim, RefusesNonsense) {
  WarmupSimConfig c = qwen35_a3b(0, 8);
  EXPECT_THROW(simulate_warmup_single_writer(c), hypic::Error);
  c = qwen35_a3b(1, 1);
  c.entry_bytes = 0;
  EXPECT_THROW(simulate_warmup_per_node_writers(c), hypic::Error);
  c = qwen35_a3b(1, 1);
  c.fs_Bps = -1;
  EXPECT_THROW(simulate_warmup_per_node_writers(c), hypic::Error);
}

}  // namespace warmup_sim_test
}  // namespace
