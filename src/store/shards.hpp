#pragma once
// A sharded store: the store file itself (the home file, written by rank 0 or one process)
// plus shard files beside it, one per writer rank, named in a small manifest
// STORE.shards.json. SegmentStore::open reads the manifest and opens every shard, so every
// reader sees one logical store (docs/store-format.md, "Sharded stores").
#include <string>
#include <vector>

namespace hypic::store {

// STORE.shards.json: the manifest naming the shard files of the store at `store_path`.
std::string shard_manifest_path(const std::string& store_path);

// The shard file rank `rank` writes in a sharded warm-up: STORE.rank<r>.h5.
std::string shard_path(const std::string& store_path, int rank);

// The shard files the manifest names, as paths (relative names resolved against the store's
// folder), in manifest order; empty when there is no manifest. A manifest that is not one
// (bad JSON, another format, a name with a folder in it) is a hypic::Error naming it.
std::vector<std::string> read_shard_manifest(const std::string& store_path);

// Adds `shard_files` (paths in the store's folder; only their file names are recorded) to the
// manifest, keeping the names already there and their order; written atomically (a temporary
// file, then a rename), so a reader sees the old or the new manifest, never a torn one.
void add_to_shard_manifest(const std::string& store_path,
                           const std::vector<std::string>& shard_files);

}  // namespace hypic::store
