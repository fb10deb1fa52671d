// Dataset files (eval/datasets.hpp): the first byte picks the split rule and whether bad
// records are skipped; the rest is the file, read by read_dataset (LongBench JSONL or HotpotQA
// JSON by content), and also split directly as one context.
#include "eval/datasets.hpp"
#include "fuzz_util.hpp"

using namespace hypic::eval;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static hypic_fuzz::TempFile file(".jsonl");
  static const SplitRule kRules[] = {SplitRule::kPassages, SplitRule::kDocuments,
                                     SplitRule::kExamples, SplitRule::kChunks, SplitRule::kWhole};
  const SplitRule rule = kRules[(data[0] & 0x7f) % 5];
  ReadOptions options;
  options.skip_malformed = (data[0] & 0x80) != 0;
  options.max_segment_bytes = 64;  // small, so that chunking has lines to cut
  const std::string& path = file.write(data + 1, size - 1);
  hypic_fuzz::expect_clean([&] { (void)read_dataset(path, "fuzz", rule, options); });
  const std::string_view context(reinterpret_cast<const char*>(data + 1), size - 1);
  for (const std::string& segment : split_context(context, rule, options.max_segment_bytes))
    if (segment.empty() || (rule == SplitRule::kChunks && segment.size() > 64))
      __builtin_trap();  // empty segments are dropped; chunks keep to their bound
  return 0;
}
