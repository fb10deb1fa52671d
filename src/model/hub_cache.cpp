#include "model/hub_cache.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "hypic/error.hpp"

namespace hypic::model {
namespace fs = std::filesystem;

namespace {

std::string get(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(),
                                       [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

// The refs the repo folder has, for the error line ("main, v1.0").
std::string list_refs(const fs::path& refs) {
  std::vector<std::string> names;
  std::error_code ec;
  if (fs::is_directory(refs, ec))
    for (auto it = fs::recursive_directory_iterator(refs, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file()) names.push_back(fs::relative(it->path(), refs).generic_string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

HubCacheRoot hub_cache_root(const std::map<std::string, std::string>& env) {
  if (std::string v = get(env, "HF_HUB_CACHE"); !v.empty()) return {v, "HF_HUB_CACHE"};
  if (std::string v = get(env, "HF_HOME"); !v.empty())
    return {(fs::path(v) / "hub").string(), "HF_HOME"};
  if (std::string v = get(env, "XDG_CACHE_HOME"); !v.empty())
    return {(fs::path(v) / "huggingface" / "hub").string(), "XDG_CACHE_HOME"};
  const std::string home = get(env, "HOME");
  // A literal "~" would name a folder of that name in the working directory.
  HYPIC_REQUIRE(!home.empty(),
                "the Hugging Face hub cache has no location: HOME is unset and none of "
                "HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME is set (set HF_HUB_CACHE to the cache "
                "folder, or give --model a folder)");
  return {(fs::path(home) / ".cache" / "huggingface" / "hub").string(), "the default"};
}

HubCacheRoot hub_cache_root() {
  std::map<std::string, std::string> env;
  for (const char* name : {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"})
    if (const char* v = std::getenv(name)) env[name] = v;
  return hub_cache_root(env);
}

bool looks_like_hub_id(const std::string& text) {
  // org and name as the hub allows them; a revision is a branch, tag or commit (branches may
  // hold '/', as in refs/pr/1), never a parent step.
  static const std::regex id(
      R"(^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._][A-Za-z0-9._/-]*)?$)");
  return std::regex_match(text, id) && text.find("..") == std::string::npos;
}

std::string resolve_model_location(const std::string& text, const HubCacheRoot& root) {
  std::error_code ec;
  if (fs::exists(text, ec) || !looks_like_hub_id(text)) return text;
  const size_t at = text.find('@');
  const std::string repo = text.substr(0, at);
  const bool pinned = at != std::string::npos;
  const std::string revision = pinned ? text.substr(at + 1) : "main";
  const size_t slash = repo.find('/');
  const fs::path repo_dir =
      fs::path(root.path) / ("models--" + repo.substr(0, slash) + "--" + repo.substr(slash + 1));
  const std::string where = " (hub cache " + root.path + ", from " + root.from + ")";
  HYPIC_REQUIRE(fs::is_directory(repo_dir, ec), "model '" + text +
                                                    "': no such folder, and not in the Hugging "
                                                    "Face hub cache: no " +
                                                    repo_dir.string() + where);
  const fs::path snapshots = repo_dir / "snapshots";
  std::string commit;
  const fs::path ref = repo_dir / "refs" / revision;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    commit.erase(commit.find_last_not_of(" \t\r\n") + 1);
    HYPIC_REQUIRE(!commit.empty() && commit.find('/') == std::string::npos &&
                      commit.find("..") == std::string::npos,
                  "model '" + text + "': " + ref.string() + " holds no commit hash" + where);
  } else if (is_commit_hash(revision) && fs::is_directory(snapshots / revision, ec)) {
    commit = revision;
  } else {
    throw Error("model '" + text + "': no revision '" + revision + "' in " + repo_dir.string() +
                " (no refs/" + revision +
                (is_commit_hash(revision) ? ", no snapshots/" + revision : "") +
                "; refs there: " + list_refs(repo_dir / "refs") + ")" + where);
  }
  const fs::path snapshot = snapshots / commit;
  HYPIC_REQUIRE(fs::is_directory(snapshot, ec), "model '" + text + "': refs/" + revision +
                                                    " names commit " + commit + " but " +
                                                    snapshot.string() + " is missing" + where);
  // A file whose blob is gone (an interrupted download, a pruned cache) would otherwise be
  // reported later as a missing file of the model.
  for (auto it = fs::recursive_directory_iterator(snapshot, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_symlink(ec) && !fs::exists(it->path(), ec))
      throw Error("model '" + text + "': " + it->path().string() + " links to " +
                  fs::read_symlink(it->path(), ec).string() +
                  ", which is missing (an interrupted download?)" + where);
  }
  return snapshot.string();
}

std::string resolve_model_location(const std::string& text) {
  std::error_code ec;
  if (fs::exists(text, ec) || !looks_like_hub_id(text)) return text;  // no cache needed
  return resolve_model_location(text, hub_cache_root());
}

}  // namespace hypic::model
