#include "eval/chat_session.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/files.hpp"
#include "common/units.hpp"
#include "hypic/error.hpp"
#include "store/open.hpp"
#include "store/segment_store.hpp"

namespace hypic::eval {
namespace {
namespace fs = std::filesystem;

constexpr const char* kHelp =
    "commands:\n"
    "  add FILE|DIR          add a text file, or every file of a folder (id: file name)\n"
    "  add-text TEXT         add TEXT as a document; 'add-text' alone reads lines up to a\n"
    "                        line holding only '.'\n"
    "  list                  show the documents\n"
    "  ask QUESTION          answer over all documents\n"
    "  ask-on ID,ID QUESTION answer over the chosen documents, in that order\n"
    "  mode M                full | prefix | pic | pic-addition\n"
    "  junction W            junction window: tokens, or a share in (0,1]\n"
    "  help                  this text\n"
    "  quit                  end the session (so does end of input)\n";

const char* kPrefix = "Answer the question using the documents below.\n\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string one_line(const std::string& s, size_t max_chars = 0) {
  std::string r;
  for (char c : s) {
    if (c == '\n')
      r += "\\n";
    else if (c == '\r' || c == '\t')
      r += ' ';
    else
      r += c;
  }
  if (max_chars > 0 && r.size() > max_chars) {
    size_t cut = max_chars;  // keep UTF-8 sequences whole
    while (cut > 0 && (static_cast<unsigned char>(r[cut]) & 0xC0) == 0x80) --cut;
    r = r.substr(0, cut) + "...";
  }
  return r;
}

struct Doc {
  std::string id, text, source;
  std::vector<int32_t> tokens;  // the rendered segment
};

}  // namespace

class ChatSession::Impl {
 public:
  Impl(model::Model& model, std::string fingerprint, const model::Tokenizer& tok,
       ChatOptions options, bool interactive, std::FILE* out)
      : a_(std::move(options)),
        interactive_(interactive),
        out_(out),
        model_(model),
        fingerprint_(std::move(fingerprint)),
        tok_(tok) {
    mib_to_bytes(a_.memory_budget_mib, "--memory-budget");  // checked before the first question
    mode_ = pic::parse_mode(a_.mode);
    junction_ = pic::JunctionSpec::parse(a_.junction);
    if (!a_.store.empty()) {  // the user's store serves its own junction
      user_store_code_ = junction_.store_code();
      stores_.emplace(*user_store_code_,
                      store::open_for_writing(a_.store, fingerprint_, *user_store_code_,
                                              store::parse_dtype(a_.dtype)));
    }
  }
  ~Impl() {
    engines_.clear();
    for (auto& [code, st] : stores_) st.close();
    temp_dir_.reset();  // after the stores are closed: removes the session stores
  }

  // Where the engines of entry modes get cold segments (null: computed in place). Set before
  // the first question.
  void set_cold_source(pic::ColdSource* cold) { cold_ = cold; }

  // Returns false when the session should end.
  bool handle(const std::string& raw, std::istream& in) {
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#') return true;
    const size_t sp = line.find_first_of(" \t");
    const std::string cmd = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : trim(line.substr(sp));
    if (cmd == "quit" || cmd == "exit") return false;
    if (cmd == "help") {
      std::fprintf(out_, "%s", kHelp);
    } else if (cmd == "add") {
      HYPIC_REQUIRE(!rest.empty(), "add needs a file or folder");
      add_path(rest);
    } else if (cmd == "add-text") {
      add_text(rest.empty() ? read_block(in) : rest);
    } else if (cmd == "list") {
      list();
    } else if (cmd == "ask") {
      HYPIC_REQUIRE(!rest.empty(), "ask needs a question");
      std::vector<const Doc*> docs;
      for (const Doc& d : docs_) docs.push_back(&d);
      ask(docs, rest);
    } else if (cmd == "ask-on") {
      const size_t q = rest.find_first_of(" \t");
      HYPIC_REQUIRE(q != std::string::npos, "ask-on needs document ids and a question");
      ask(pick(rest.substr(0, q)), trim(rest.substr(q)));
    } else if (cmd == "mode") {
      mode_ = pic::parse_mode(rest);
      std::fprintf(out_, "mode %s\n", pic::mode_name(mode_));
    } else if (cmd == "junction") {
      junction_ = pic::JunctionSpec::parse(rest);
      std::fprintf(out_, "junction %s\n", junction_.to_string().c_str());
    } else {
      throw Error("unknown command '" + cmd + "' (type help)");
    }
    return true;
  }

 private:
  std::string read_block(std::istream& in) {
    if (interactive_) std::fprintf(out_, "(end the text with a line holding only '.')\n");
    std::string text, l;
    while (true) {
      if (interactive_) {
        std::fprintf(out_, "... ");
        std::fflush(out_);
      }
      if (!std::getline(in, l) || trim(l) == ".") break;
      text += l + "\n";
    }
    return text;
  }

  void add_path(const std::string& path) {
    HYPIC_REQUIRE(fs::exists(path), "no such file or folder: " + path);
    if (fs::is_directory(path)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(path))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.')
          files.push_back(e.path());
      std::sort(files.begin(), files.end());
      HYPIC_REQUIRE(!files.empty(), path + ": no files");
      for (const fs::path& f : files) add_file(f);
    } else {
      add_file(path);
    }
  }

  void add_file(const fs::path& p) {
    // A regular file only (a FIFO or /dev/zero would block or never end), read to its end.
    const std::string text = read_regular_file(p.string(), "add");
    add_doc(unique_id(p.stem().string()), text, p.string());
  }

  void add_text(const std::string& text) {
    add_doc(unique_id("t" + std::to_string(++texts_)), text, "typed");
  }

  std::string unique_id(std::string base) {
    for (char& c : base)
      if (c == ',' || c == ' ' || c == '\t') c = '_';
    if (base.empty()) base = "doc";
    std::string id = base;
    for (int k = 2; find(id); ++k) id = base + "-" + std::to_string(k);
    return id;
  }

  const Doc* find(const std::string& id) const {
    for (const Doc& d : docs_)
      if (d.id == id) return &d;
    return nullptr;
  }

  void add_doc(const std::string& id, const std::string& raw, const std::string& source) {
    const std::string text = trim(raw);
    HYPIC_REQUIRE(!text.empty(), source + ": the document is empty");
    Doc d{id, text, source, tok_.encode("Document " + id + ":\n" + text + "\n", false)};
    HYPIC_REQUIRE(static_cast<int64_t>(d.tokens.size()) < model_.config().max_position_embeddings,
                  source + ": the document is longer than the model's context");
    std::fprintf(out_, "added %s (%zu tokens)\n", id.c_str(), d.tokens.size());
    docs_.push_back(std::move(d));
  }

  void list() const {
    if (docs_.empty()) {
      std::fprintf(out_, "no documents (add FILE|DIR or add-text TEXT)\n");
      return;
    }
    std::fprintf(out_, "%zu document%s\n", docs_.size(), docs_.size() == 1 ? "" : "s");
    for (const Doc& d : docs_)
      std::fprintf(out_, "  %-16s %6zu tokens  %s\n", d.id.c_str(), d.tokens.size(),
                   one_line(d.text, 48).c_str());
  }

  std::vector<const Doc*> pick(const std::string& ids) const {
    std::vector<const Doc*> docs;
    std::stringstream ss(ids);
    std::string id;
    while (std::getline(ss, id, ',')) {
      if (id.empty()) continue;
      const Doc* d = find(id);
      HYPIC_REQUIRE(d != nullptr, "no document '" + id + "' (see list)");
      docs.push_back(d);
    }
    return docs;
  }

  store::SegmentStore* store_for(int code) {
    auto it = stores_.find(code);
    if (it != stores_.end()) return &it->second;
    // Another junction than the user's store (or no store given): a session store.
    // In a folder only this user can enter, made with a name nobody can predict; the file is
    // created empty first (O_EXCL | O_NOFOLLOW), and an empty file is made a new store.
    if (!temp_dir_) temp_dir_.emplace("hypic_chat");
    const std::string path = temp_dir_->create_file("store-" + std::to_string(code) + ".h5");
    if (user_store_code_)
      std::fprintf(stderr, "chat: %s holds junction %s; junction %s uses a session store\n",
                   a_.store.c_str(),
                   pic::JunctionSpec::from_store_code(*user_store_code_).to_string().c_str(),
                   pic::JunctionSpec::from_store_code(code).to_string().c_str());
    try {
      return &stores_
                  .emplace(code, store::open_for_writing(path, fingerprint_, code,
                                                         store::parse_dtype(a_.dtype)))
                  .first->second;
    } catch (...) {
      std::error_code ec;
      fs::remove(path, ec);  // so that a later question can make it again
      throw;
    }
  }

  pic::Engine& engine() {
    const std::string key = std::string(pic::mode_name(mode_)) + "/" + junction_.to_string();
    auto it = engines_.find(key);
    if (it != engines_.end()) return *it->second;
    pic::EngineOptions eo;
    eo.mode = mode_;
    eo.junction = junction_;
    eo.memory_budget_bytes = mib_to_bytes(a_.memory_budget_mib, "--memory-budget");
    store::SegmentStore* st =
        pic::uses_entries(mode_) ? store_for(junction_.store_code()) : nullptr;
    auto e = std::make_unique<pic::Engine>(model_, fingerprint_, eo, st);
    if (pic::uses_entries(mode_)) e->set_cold_source(cold_);
    return *engines_.emplace(key, std::move(e)).first->second;
  }

  void ask(const std::vector<const Doc*>& docs, const std::string& question) {
    HYPIC_REQUIRE(!docs.empty(), "no documents to ask over (add some first)");
    HYPIC_REQUIRE(!question.empty(), "the question is empty");
    pic::Query q;
    q.id = "q" + std::to_string(++questions_);
    q.prefix = tok_.encode(kPrefix, false);
    int64_t n = static_cast<int64_t>(q.prefix.size());
    for (const Doc* d : docs) {
      q.segments.push_back(d->tokens);
      n += static_cast<int64_t>(d->tokens.size());
    }
    q.question = tok_.encode("\nQuestion: " + question + "\nAnswer:", false);
    q.max_new_tokens = a_.max_new_tokens;
    q.no_repeat_ngram = a_.no_repeat_ngram;
    n += static_cast<int64_t>(q.question.size());
    const std::string too_long = model::context_overflow(model_.config(), n, a_.max_new_tokens);
    HYPIC_REQUIRE(too_long.empty(),
                  too_long + "; use ask-on with fewer documents or a smaller --max-new-tokens");
    const pic::QueryResult r = engine().run(q);
    std::fprintf(out_, "answer: %s\n", one_line(tok_.decode(r.answer, true)).c_str());
    std::fprintf(
        out_,
        "stats: ttft %.1f ms | hits %d (memory %d, store %d) | colds %d | %d document%s, %lld "
        "prompt tokens | mode %s, junction %s\n",
        r.times.ttft * 1e3, r.hits_memory + r.hits_store, r.hits_memory, r.hits_store, r.cold,
        r.segments, r.segments == 1 ? "" : "s", static_cast<long long>(r.prompt_tokens),
        pic::mode_name(mode_), junction_.to_string().c_str());
  }

  ChatOptions a_;
  bool interactive_;
  std::FILE* out_;
  model::Model& model_;
  std::string fingerprint_;
  const model::Tokenizer& tok_;
  pic::Mode mode_ = pic::Mode::Pic;
  pic::JunctionSpec junction_;
  std::vector<Doc> docs_;
  std::optional<PrivateTempDir> temp_dir_;  // the session stores' folder, made on first use
  std::map<int, store::SegmentStore> stores_;
  std::optional<int> user_store_code_;
  std::map<std::string, std::unique_ptr<pic::Engine>> engines_;
  pic::ColdSource* cold_ = nullptr;
  int texts_ = 0, questions_ = 0;
};

ChatSession::ChatSession(model::Model& model, std::string fingerprint, const model::Tokenizer& tok,
                         ChatOptions options, bool interactive, std::FILE* out)
    : impl_(std::make_unique<Impl>(model, std::move(fingerprint), tok, std::move(options),
                                   interactive, out)) {}

ChatSession::~ChatSession() = default;

void ChatSession::set_cold_source(pic::ColdSource* cold) {
  impl_->set_cold_source(cold);
}

bool ChatSession::handle(const std::string& line, std::istream& in) {
  return impl_->handle(line, in);
}

}  // namespace hypic::eval
