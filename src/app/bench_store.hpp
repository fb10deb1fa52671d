#pragma once
// The warm-up simulation `hypic bench scaling --warmup-config FILE` prints (bench_store_cmd.cpp).
#include <cstdint>
#include <string>

namespace hypic::app {

struct WarmupSimArgs {
  WarmupSimArgs();
  std::string config;             // a Hugging Face config.json: the entry sizes
  int segment_tokens = 512;       // tokens per warm-up segment
  double segment_ms = 40;         // one worker's compute time per segment (a GPU: tens of ms)
  double link_GBps = 25;          // a node's network link, rank 0's included
  double writer_GBps = 1.5;       // one writer into its own file (measure: hypic bench store)
  double node_storage_GBps = 0;   // a node's bandwidth to the file system (0: the link's)
  double fs_GBps = 0;             // the file system in all (0: not a limit)
  int64_t query_tokens = 100000;  // the cold query whose TTFT is printed
  double compose_ms = 2;          // rank 0's composition time per segment
};

int run_warmup_simulation(const WarmupSimArgs& a);

}  // namespace hypic::app
