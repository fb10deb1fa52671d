#pragma once
// `--model` as a Hugging Face hub id: `org/name` or `org/name@revision`, resolved offline from
// the hub cache the way transformers and vLLM find it (docs/models.md, "Models in the hub
// cache"). The cache folder is HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; in it
//   models--org--name/refs/<revision>      a file holding the snapshot's commit hash
//   models--org--name/snapshots/<commit>/  the files, each a symlink to ../../blobs/<sha>
// A revision is a ref (branch or tag; default main) or a commit hash directly.
#include <map>
#include <string>

namespace hypic::model {

// Where the hub cache is and which setting chose it ("HF_HUB_CACHE", "HF_HOME", ...).
struct HubCacheRoot {
  std::string path;
  std::string from;
};

// The cache folder from the given environment (name -> value; unset names absent). Throws
// hypic::Error, one line, when none of them is set, HOME included.
HubCacheRoot hub_cache_root(const std::map<std::string, std::string>& env);
// The same from this process's environment.
HubCacheRoot hub_cache_root();

// True when `text` has the shape of a hub id: org/name[@revision], nothing else.
bool looks_like_hub_id(const std::string& text);

// What --model names, as a folder: `text` itself when it exists on disk (a path always wins)
// or is not shaped like a hub id; otherwise the hub snapshot's folder. Throws hypic::Error,
// one line naming where it looked, when the model, the revision or a file's blob is missing.
std::string resolve_model_location(const std::string& text, const HubCacheRoot& root);
// The same with this process's hub cache, which is looked up only when `text` is a hub id.
std::string resolve_model_location(const std::string& text);

}  // namespace hypic::model
