#include "store/shards.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "hypic/error.hpp"

namespace hypic::store {
namespace {
namespace fs = std::filesystem;
constexpr const char* kManifestFormat = "hypic-store-shards";
constexpr int kManifestVersion = 1;

// The file names the manifest holds (no folders), in order.
std::vector<std::string> manifest_names(const std::string& manifest) {
  const std::string text = read_regular_file(manifest, "shard manifest");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("shard manifest " + manifest + " is not valid JSON: " + e.what());
  }
  const bool ok = j.is_object() && j.value("format", "") == kManifestFormat &&
                  j.contains("version") && j["version"].is_number_integer() &&
                  j.contains("shards") && j["shards"].is_array();
  HYPIC_REQUIRE(ok, "shard manifest " + manifest +
                        " is not a hypic shard manifest (want {\"format\": \"" +
                        std::string(kManifestFormat) + "\", \"version\": 1, \"shards\": [...]})");
  HYPIC_REQUIRE(j["version"].get<int>() <= kManifestVersion,
                "shard manifest " + manifest + " has version " +
                    std::to_string(j["version"].get<int>()) + ", newer than this hypic reads (" +
                    std::to_string(kManifestVersion) + ")");
  std::vector<std::string> names;
  for (const nlohmann::json& s : j["shards"]) {
    HYPIC_REQUIRE(s.is_string(), "shard manifest " + manifest + ": every shard is a file name");
    const std::string name = s.get<std::string>();
    HYPIC_REQUIRE(
        !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos,
        "shard manifest " + manifest + ": shard '" + name +
            "' is not a file name in the store's folder");
    names.push_back(name);
  }
  return names;
}

fs::path folder_of(const std::string& store_path) {
  const fs::path p(store_path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

}  // namespace

std::string shard_manifest_path(const std::string& store_path) {
  return store_path + ".shards.json";
}

std::string shard_path(const std::string& store_path, int rank) {
  return store_path + ".rank" + std::to_string(rank) + ".h5";
}

std::vector<std::string> read_shard_manifest(const std::string& store_path) {
  const std::string manifest = shard_manifest_path(store_path);
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return {};
  std::vector<std::string> paths;
  const bool here = !fs::path(store_path).has_parent_path();  // "S.h5", not "./S.h5.rank1.h5"
  for (const std::string& name : manifest_names(manifest))
    paths.push_back(here ? name : (folder_of(store_path) / name).string());
  return paths;
}

void add_to_shard_manifest(const std::string& store_path,
                           const std::vector<std::string>& shard_files) {
  const std::string manifest = shard_manifest_path(store_path);
  std::error_code ec;
  std::vector<std::string> names;
  if (fs::exists(manifest, ec)) names = manifest_names(manifest);
  bool changed = !fs::exists(manifest, ec);
  for (const std::string& f : shard_files) {
    const std::string name = fs::path(f).filename().string();
    HYPIC_REQUIRE(fs::absolute(folder_of(f)).lexically_normal() ==
                      fs::absolute(folder_of(store_path)).lexically_normal(),
                  "shard " + f + " is not in the folder of its store " + store_path);
    bool known = false;
    for (const std::string& n : names) known = known || n == name;
    if (known) continue;
    names.push_back(name);
    changed = true;
  }
  if (!changed) return;
  nlohmann::json j = {{"format", kManifestFormat},
                      {"version", kManifestVersion},
                      {"store", fs::path(store_path).filename().string()},
                      {"shards", names}};
  const std::string tmp = manifest + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    HYPIC_REQUIRE(out.good(), "cannot write the shard manifest " + tmp);
    out << j.dump(1) << "\n";
    out.flush();
    HYPIC_REQUIRE(out.good(), "writing the shard manifest " + tmp + " failed (disk full?)");
  }
  HYPIC_REQUIRE(std::rename(tmp.c_str(), manifest.c_str()) == 0,
                "cannot rename " + tmp + " to " + manifest);
}

}  // namespace hypic::store
