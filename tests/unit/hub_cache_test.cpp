// `--model org/name[@revision]`: the hub cache resolver (model/hub_cache.hpp) on a cache laid
// out by the test as huggingface_hub lays it out (refs, snapshots, symlinked blobs), and the
// commands that take it through the binary.
#include "model/hub_cache.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "error_of.hpp"
#include "temp_path.hpp"

namespace fs = std::filesystem;
using hypic::model::hub_cache_root;
using hypic::model::HubCacheRoot;
using hypic::model::looks_like_hub_id;
using hypic::model::resolve_model_location;
using test_util::error_of;
using test_util::TempDir;

namespace {
namespace hub_cache_test {

const std::string kMain = "0123456789abcdef0123456789abcdef01234567";
const std::string kOld = "fedcba9876543210fedcba9876543210fedcba98";

// Writes `text` as a blob and links snapshots/<commit>/<name> to it, as the hub does.
void add_file(const fs::path& repo, const std::string& commit, const std::string& name,
              const std::string& blob, const std::string& text) {
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / commit);
  std::ofstream(repo / "blobs" / blob) << text;
  fs::create_symlink(fs::path("../../blobs") / blob, repo / "snapshots" / commit / name);
}

void add_ref(const fs::path& repo, const std::string& ref, const std::string& commit) {
  fs::create_directories((repo / "refs" / ref).parent_path());
  std::ofstream(repo / "refs" / ref) << commit;  // no newline, as huggingface_hub writes it
}

// A cache with org/tiny: main -> kMain, v1 -> kOld, kOld also reachable by its hash.
fs::path make_cache(const TempDir& tmp) {
  const fs::path root = tmp.file("hub");
  const fs::path repo = root / "models--org--tiny";
  add_file(repo, kMain, "config.json", "b1", R"({"rev": "main"})");
  add_file(repo, kOld, "config.json", "b2", R"({"rev": "v1"})");
  add_ref(repo, "main", kMain);
  add_ref(repo, "v1", kOld);
  return root;
}

std::string read(const fs::path& p) {
  return cli_test::slurp(p);
}

TEST(HubCache, RootFollowsHfHubCacheThenHfHomeThenDefault) {
  EXPECT_EQ(hub_cache_root({{"HF_HUB_CACHE", "/c"}, {"HF_HOME", "/h"}, {"HOME", "/u"}}).path, "/c");
  EXPECT_EQ(hub_cache_root({{"HF_HOME", "/h"}, {"HOME", "/u"}}).path, "/h/hub");
  EXPECT_EQ(hub_cache_root({{"HF_HOME", "/h"}}).from, "HF_HOME");
  EXPECT_EQ(hub_cache_root({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/u"}}).path, "/x/huggingface/hub");
  EXPECT_EQ(hub_cache_root({{"HOME", "/u"}}).path, "/u/.cache/huggingface/hub");
  EXPECT_EQ(hub_cache_root({{"HF_HUB_CACHE", ""}, {"HOME", "/u"}}).path,
            "/u/.cache/huggingface/hub");  // set but empty counts as unset
}

// Without HOME and without any of the cache settings there is no cache folder: one line says
// so (it used to resolve to a literal "~/.cache/..." under the working directory).
TEST(HubCache, NoHomeAndNoSettingIsOneClearError) {
  for (const auto& env : std::vector<std::map<std::string, std::string>>{
           {}, {{"HOME", ""}, {"HF_HOME", ""}, {"HF_HUB_CACHE", ""}}}) {
    const std::string e = error_of([&] { hub_cache_root(env); });
    EXPECT_NE(e.find("HOME is unset"), std::string::npos) << e;
    EXPECT_NE(e.find("HF_HUB_CACHE"), std::string::npos) << e;
    EXPECT_NE(e.find("HF_HOME"), std::string::npos) << e;
    EXPECT_EQ(e.find('~'), std::string::npos) << e;
  }
  EXPECT_EQ(hub_cache_root({{"HF_HOME", "/h"}}).path, "/h/hub");  // HOME not needed then
}

TEST(HubCache, HubIdShape) {
  EXPECT_TRUE(looks_like_hub_id("Qwen/Qwen3.5-35B-A3B"));
  EXPECT_TRUE(looks_like_hub_id("org/name@main"));
  EXPECT_TRUE(looks_like_hub_id("org/name@refs/pr/1"));
  EXPECT_TRUE(looks_like_hub_id("org/name@" + kMain));
  EXPECT_FALSE(looks_like_hub_id("inputs/models/qwen3_5-synthqa"));  // two slashes: a path
  EXPECT_FALSE(looks_like_hub_id("/abs/name"));
  EXPECT_FALSE(looks_like_hub_id("./name"));
  EXPECT_FALSE(looks_like_hub_id("name"));
  EXPECT_FALSE(looks_like_hub_id("org/name@../../etc"));
  EXPECT_FALSE(looks_like_hub_id("org/name@"));
}

TEST(HubCache, MainRefLeadsToTheSnapshotWhoseFilesAreSymlinkedBlobs) {
  TempDir tmp("hypic-hub");
  const HubCacheRoot root{make_cache(tmp).string(), "HF_HUB_CACHE"};
  const std::string dir = resolve_model_location("org/tiny", root);
  EXPECT_EQ(fs::path(dir), fs::path(root.path) / "models--org--tiny" / "snapshots" / kMain);
  EXPECT_TRUE(fs::is_symlink(fs::path(dir) / "config.json"));
  EXPECT_EQ(read(fs::path(dir) / "config.json"), R"({"rev": "main"})");
}

TEST(HubCache, RevisionByRefOrByCommitHash) {
  TempDir tmp("hypic-hub");
  const HubCacheRoot root{make_cache(tmp).string(), "HF_HUB_CACHE"};
  EXPECT_EQ(read(fs::path(resolve_model_location("org/tiny@v1", root)) / "config.json"),
            R"({"rev": "v1"})");
  EXPECT_EQ(read(fs::path(resolve_model_location("org/tiny@" + kOld, root)) / "config.json"),
            R"({"rev": "v1"})");
  EXPECT_EQ(read(fs::path(resolve_model_location("org/tiny@main", root)) / "config.json"),
            R"({"rev": "main"})");
}

TEST(HubCache, AnExistingFolderWinsOverTheHubId) {
  TempDir tmp("hypic-hub");
  const HubCacheRoot root{make_cache(tmp).string(), "HF_HUB_CACHE"};
  // "org/tiny" relative to the working folder exists: it is taken as it is.
  const fs::path cwd = fs::current_path();
  fs::create_directories(tmp.file("work/org/tiny"));
  fs::current_path(tmp.file("work"));
  const std::string got = resolve_model_location("org/tiny", root);
  fs::current_path(cwd);
  EXPECT_EQ(got, "org/tiny");
  // Not shaped like a hub id: passed on for the loader to refuse.
  EXPECT_EQ(resolve_model_location("no/such/folder", root), "no/such/folder");
}

TEST(HubCache, MissingModelSaysWhereItLooked) {
  TempDir tmp("hypic-hub");
  const HubCacheRoot root{make_cache(tmp).string(), "HF_HUB_CACHE"};
  const std::string e = error_of([&] { resolve_model_location("org/absent", root); });
  EXPECT_NE(e.find("model 'org/absent'"), std::string::npos) << e;
  EXPECT_NE(e.find((fs::path(root.path) / "models--org--absent").string()), std::string::npos) << e;
  EXPECT_NE(e.find("HF_HUB_CACHE"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(HubCache, MissingRevisionNamesTheRefsThere) {
  TempDir tmp("hypic-hub");
  const HubCacheRoot root{make_cache(tmp).string(), "HF_HUB_CACHE"};
  const std::string e = error_of([&] { resolve_model_location("org/tiny@v2", root); });
  EXPECT_NE(e.find("no revision 'v2'"), std::string::npos) << e;
  EXPECT_NE(e.find("refs there: main, v1"), std::string::npos) << e;
  // A commit hash that has no snapshot.
  const std::string h(40, 'a');
  const std::string e2 = error_of([&] { resolve_model_location("org/tiny@" + h, root); });
  EXPECT_NE(e2.find("no snapshots/" + h), std::string::npos) << e2;
}

TEST(HubCache, RefToAMissingSnapshotOrBlobIsRefused) {
  TempDir tmp("hypic-hub");
  const fs::path cache = make_cache(tmp);
  const HubCacheRoot root{cache.string(), "HF_HUB_CACHE"};
  const fs::path repo = cache / "models--org--tiny";
  add_ref(repo, "gone", std::string(40, 'b'));
  const std::string e = error_of([&] { resolve_model_location("org/tiny@gone", root); });
  EXPECT_NE(e.find("names commit " + std::string(40, 'b')), std::string::npos) << e;
  fs::remove(repo / "blobs" / "b1");  // an interrupted download
  const std::string e2 = error_of([&] { resolve_model_location("org/tiny", root); });
  EXPECT_NE(e2.find("config.json links to ../../blobs/b1, which is missing"), std::string::npos)
      << e2;
}

// The binary: `model info` and `tokenize` find the embedded model by a hub id in a cache that
// HF_HUB_CACHE names; a missing one is one line.
TEST(HubCacheCli, ModelInfoAndTokenizeTakeAHubId) {
  TempDir tmp("hypic-hub");
  const fs::path model = fs::absolute(fs::path(HYPIC_TEST_DATA_DIR) / ".." / ".." / "inputs" /
                                      "models" / "qwen3_5-synthqa");
  ASSERT_TRUE(fs::exists(model / "config.json")) << model;
  const fs::path repo = fs::path(tmp.file("hub")) / "models--hypic--synthqa";
  fs::create_directories(repo / "snapshots" / kMain);
  fs::create_directories(repo / "blobs");
  int n = 0;
  for (const char* name : {"config.json", "tokenizer.json", "model.safetensors"}) {
    const std::string blob = "sha" + std::to_string(n++);
    fs::create_symlink(model / name, repo / "blobs" / blob);  // blobs may be large: linked
    fs::create_symlink(fs::path("../../blobs") / blob, repo / "snapshots" / kMain / name);
  }
  add_ref(repo, "main", kMain);
  const std::string env = "HF_HUB_CACHE=" + tmp.file("hub") + " ";
  const cli_test::CliRun direct =
      cli_test::run_hypic(tmp.file(""), "model info --model " + model.string());
  ASSERT_EQ(direct.code, 0) << direct.err;
  const cli_test::CliRun hub =
      cli_test::run_shell(tmp.file(""), env + HYPIC_BINARY + " model info --model hypic/synthqa");
  ASSERT_EQ(hub.code, 0) << hub.err;
  EXPECT_NE(hub.out.find("layers"), std::string::npos) << hub.out;
  // The snapshot is the model: its folder is named, and it has the same layers and parameters.
  EXPECT_NE(hub.out.find("snapshots/" + kMain), std::string::npos) << hub.out;
  const auto line = [](const std::string& s, const std::string& key) {
    const size_t at = s.find(key);
    return at == std::string::npos ? std::string() : s.substr(at, s.find('\n', at) - at);
  };
  for (const char* key : {"layers       :", "parameters   :", "layout       :"}) {
    EXPECT_FALSE(line(direct.out, key).empty()) << direct.out;
    EXPECT_EQ(line(hub.out, key), line(direct.out, key));
  }
  const cli_test::CliRun tok = cli_test::run_shell(
      tmp.file(""),
      env + HYPIC_BINARY + " tokenize --model hypic/synthqa@main --text hello --ids-only");
  EXPECT_EQ(tok.code, 0) << tok.err;
  EXPECT_FALSE(tok.out.empty());
  const cli_test::CliRun missing =
      cli_test::run_shell(tmp.file(""), env + HYPIC_BINARY + " model info --model hypic/other");
  cli_test::expect_one_line_error(missing, "models--hypic--other");
  EXPECT_NE(missing.err.find("HF_HUB_CACHE"), std::string::npos) << missing.err;
  // No HOME and no cache setting: a hub id is refused in one line; a folder needs no cache.
  const std::string bare = "env -u HOME -u HF_HOME -u HF_HUB_CACHE -u XDG_CACHE_HOME ";
  cli_test::expect_one_line_error(
      cli_test::run_shell(tmp.file(""), bare + HYPIC_BINARY + " model info --model hypic/synthqa"),
      "HOME is unset and none of HF_HUB_CACHE, HF_HOME");
  const cli_test::CliRun folder = cli_test::run_shell(
      tmp.file(""), bare + HYPIC_BINARY + " model info --model " + model.string());
  EXPECT_EQ(folder.code, 0) << folder.err;
}

}  // namespace hub_cache_test
}  // namespace
