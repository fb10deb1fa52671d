#pragma once
// A byte-budgeted least-recently-used map: the memory tier in front of the segment store,
// and the home of the prefix mode's snapshots (the same budget for both, so the modes
// compare fairly). Values are shared and immutable; one that alone exceeds the budget is
// not kept.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace hypic::pic {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t budget_bytes) : budget_(budget_bytes) {}

  // The value (made most recent), or null.
  std::shared_ptr<const V> get(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }

  // Inserts or replaces, then evicts least-recently-used values until within budget.
  // Returns false when the value alone exceeds the budget (it is not kept).
  bool put(const std::string& key, std::shared_ptr<const V> value, size_t bytes) {
    erase(key);
    if (bytes > budget_) return false;
    order_.push_front(Node{key, std::move(value), bytes});
    index_[key] = order_.begin();
    used_ += bytes;
    while (used_ > budget_) {
      used_ -= order_.back().bytes;
      index_.erase(order_.back().key);
      order_.pop_back();
      ++evictions_;
    }
    return true;
  }
  void erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    used_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
  }

  size_t size() const { return index_.size(); }
  size_t bytes() const { return used_; }
  size_t budget() const { return budget_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Node {
    std::string key;
    std::shared_ptr<const V> value;
    size_t bytes;
  };
  size_t budget_;
  size_t used_ = 0;
  uint64_t evictions_ = 0;
  std::list<Node> order_;  // most recent first
  std::unordered_map<std::string, typename std::list<Node>::iterator> index_;
};

}  // namespace hypic::pic
