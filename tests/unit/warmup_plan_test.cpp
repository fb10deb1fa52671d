// The warm-up planner without MPI or a store: which documents become tasks, with which key
// and junction window, and how they are named.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "cluster/distributed.hpp"
#include "store/entry.hpp"

namespace {
namespace warmup_plan_test {

TEST(WarmupPlan, SkipsStoredAndRepeatedDocumentsAndKeepsCorpusOrder) {
  const std::vector<std::vector<int32_t>> docs = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 6}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {7, 8, 9}, {4}};
  hypic::pic::JunctionSpec j;
  j.width = 4;
  const std::string fp = "fp";
  const std::set<std::string> stored = {hypic::store::entry_key(fp, docs[3], 2)};
  const auto plan = hypic::cluster::plan_warmup(
      docs, fp, j, [&](const std::string& key) { return stored.count(key) > 0; },
      {"a", "b", "c", "d"});
  ASSERT_EQ(plan.tasks.size(), 3u);  // docs 0, 1, 4: doc 2 repeats doc 0, doc 3 is stored
  EXPECT_EQ(plan.tasks[0].segment, 0);
  EXPECT_EQ(plan.tasks[1].segment, 1);
  EXPECT_EQ(plan.tasks[2].segment, 4);
  EXPECT_EQ(plan.tasks[0].junction, 4);
  EXPECT_EQ(plan.tasks[1].junction, 1);  // capped at n - 1
  EXPECT_EQ(plan.tasks[2].junction, 0);
  EXPECT_EQ(plan.tasks[0].key, hypic::store::entry_key(fp, docs[0], 4));
  EXPECT_EQ(plan.tasks[1].tokens, docs[1]);
  EXPECT_EQ(plan.missing_tokens, 13);
  EXPECT_EQ(plan.labels[0], "document \"a\"");
  EXPECT_EQ(plan.labels[2], "");  // doc 4 has no name
}

}  // namespace warmup_plan_test
}  // namespace
