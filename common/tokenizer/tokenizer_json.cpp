// tokenizer.json -> BpeParts, with a message naming the file and the field for everything that is
// malformed or not supported.
#include "common/tokenizer/tokenizer_json.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/tokenizer/utf8.hpp"

namespace kvheap {

namespace {

using nlohmann::json;

// Real tokenizer.json files are a few megabytes to a few dozen (Gemma 3: 33 MB).
constexpr std::uint64_t kMaxTokenizerJsonBytes = std::uint64_t{256} << 20;
// Ids beyond this belong to no real vocabulary (the largest have about 262k tokens); the limit
// keeps a wrong number from allocating gigabytes.
constexpr std::int64_t kMaxTokenId = (1 << 21) - 1;

/// Where in the file a value is, for messages: the file and a path like model.merges[17].
struct Where {
  const std::string& file;
  std::string field;
  [[nodiscard]] Where operator/(const std::string& key) const {
    return {file, field.empty() ? key : field + "." + key};
  }
  [[nodiscard]] Where operator[](std::size_t i) const {
    return {file, fmt::format("{}[{}]", field, i)};
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("tokenizer.json '{}': {}: {}", file, field, what));
  }
};

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& j, const char* key, const Where& w, const char* fallback) {
  const json* v = member(j, key);
  if (v == nullptr) {
    if (fallback != nullptr) return fallback;
    (w / key).fail("missing; expected a string");
  }
  if (!v->is_string()) (w / key).fail("expected a string, got " + v->dump());
  return v->get<std::string>();
}

bool get_bool(const json& j, const char* key, const Where& w, bool fallback) {
  const json* v = member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) (w / key).fail("expected true or false, got " + v->dump());
  return v->get<bool>();
}

int get_id(const json& v, const Where& w) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMaxTokenId)
    w.fail(fmt::format("expected a token id from 0 to {}, got {}", kMaxTokenId, v.dump()));
  return static_cast<int>(v.get<std::int64_t>());
}

const json& object_at(const json& j, const char* key, const Where& w) {
  const json* v = member(j, key);
  if (v == nullptr || !v->is_object()) (w / key).fail("missing or not a JSON object");
  return *v;
}

std::string type_of(const json& j, const Where& w) {
  if (!j.is_object()) w.fail("expected a JSON object, got " + j.dump());
  return get_string(j, "type", w, nullptr);
}

// The text a {"String": s} or {"Regex": r} pattern object holds, and whether it is a regex.
std::pair<std::string, bool> pattern_of(const json& j, const Where& w) {
  const Where at = w / "pattern";
  const json* p = member(j, "pattern");
  if (p == nullptr || !p->is_object()) at.fail("expected {\"Regex\": ...} or {\"String\": ...}");
  if (const json* r = member(*p, "Regex"); r != nullptr && r->is_string())
    return {r->get<std::string>(), true};
  if (const json* s = member(*p, "String"); s != nullptr && s->is_string())
    return {s->get<std::string>(), false};
  at.fail("expected {\"Regex\": ...} or {\"String\": ...}, got " + p->dump());
}

std::string quote_regex(const std::string& s) { return "\\Q" + s + "\\E"; }

void read_normalizer(const json& j, const Where& w, BpeParts& parts) {
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    const json* list = member(j, "normalizers");
    if (list == nullptr || !list->is_array()) (w / "normalizers").fail("expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      read_normalizer((*list)[i], (w / "normalizers")[i], parts);
  } else if (type == "NFC") {
    parts.normalizer.push_back({NormalizeStep::Kind::Nfc, "", ""});
  } else if (type == "Prepend") {
    parts.normalizer.push_back(
        {NormalizeStep::Kind::Prepend, "", get_string(j, "prepend", w, nullptr)});
  } else if (type == "Replace") {
    const auto [from, regex] = pattern_of(j, w);
    if (regex)
      (w / "pattern").fail("a Regex pattern in Replace is not supported; expected a String");
    if (from.empty()) (w / "pattern").fail("the String to replace is empty");
    parts.normalizer.push_back(
        {NormalizeStep::Kind::Replace, from, get_string(j, "content", w, nullptr)});
  } else {
    (w / "type")
        .fail(fmt::format("'{}' is not supported; kvheap reads the normalizers NFC, "
                          "Prepend, Replace and Sequence",
                          type));
  }
}

void read_pre_tokenizer(const json& j, const Where& w, BpeParts& parts) {
  const std::string type = type_of(j, w);
  PreTokenizeStep step{};
  if (type == "Sequence") {
    const json* list = member(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) (w / "pretokenizers").fail("expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      read_pre_tokenizer((*list)[i], (w / "pretokenizers")[i], parts);
    return;
  }
  if (type == "Split") {
    const auto [text, regex] = pattern_of(j, w);
    const std::string behavior = get_string(j, "behavior", w, "Isolated");
    if (behavior != "Isolated")
      (w / "behavior").fail(fmt::format("'{}' is not supported; expected \"Isolated\"", behavior));
    if (get_bool(j, "invert", w, false)) (w / "invert").fail("true is not supported");
    step.kind = PreTokenizeStep::Kind::Split;
    step.pattern = std::make_shared<const SplitPattern>(
        regex ? text : quote_regex(text),
        fmt::format("tokenizer.json '{}': {}", w.file, (w / "pattern").field));
  } else if (type == "ByteLevel") {
    parts.byte_level = true;
    step.kind = PreTokenizeStep::Kind::ByteLevel;
    step.prefix_space = get_bool(j, "add_prefix_space", w, false);
    if (get_bool(j, "use_regex", w, true))
      step.pattern = std::make_shared<const SplitPattern>(
          SplitPattern::kGpt2, fmt::format("tokenizer.json '{}': {}", w.file, w.field));
  } else if (type == "Metaspace") {
    step.kind = PreTokenizeStep::Kind::Metaspace;
    step.replacement = get_string(j, "replacement", w, "\u2581");
    if (step.replacement.empty()) (w / "replacement").fail("is empty");
    // Older files say add_prefix_space (true: always); newer ones prepend_scheme.
    const std::string scheme = get_string(
        j, "prepend_scheme", w, get_bool(j, "add_prefix_space", w, true) ? "always" : "never");
    if (scheme == "always") {
      step.prepend = PreTokenizeStep::Prepend::Always;
    } else if (scheme == "first") {
      step.prepend = PreTokenizeStep::Prepend::First;
    } else if (scheme == "never") {
      step.prepend = PreTokenizeStep::Prepend::Never;
    } else {
      (w / "prepend_scheme").fail(fmt::format("'{}'; expected always, first or never", scheme));
    }
    step.split = get_bool(j, "split", w, true);
  } else {
    (w / "type")
        .fail(fmt::format("'{}' is not supported; kvheap reads the pre-tokenizers Split, "
                          "ByteLevel, Metaspace and Sequence",
                          type));
  }
  parts.pre_tokenizer.push_back(std::move(step));
}

void read_post_processor(const json& j, const Where& w, BpeParts& parts) {
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    const json* list = member(j, "processors");
    if (list == nullptr || !list->is_array()) (w / "processors").fail("expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      read_post_processor((*list)[i], (w / "processors")[i], parts);
  } else if (type == "ByteLevel") {
    // Only moves offsets, which kvheap does not report.
  } else if (type == "TemplateProcessing") {
    const json* single = member(j, "single");
    const Where ws = w / "single";
    if (single == nullptr || !single->is_array()) ws.fail("expected an array");
    std::string bos;
    bool text_seen = false;
    for (std::size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      if (const json* s = member(item, "SpecialToken"); s != nullptr && !text_seen && bos.empty()) {
        bos = get_string(*s, "id", ws[i] / "SpecialToken", nullptr);
      } else if (member(item, "Sequence") != nullptr && !text_seen) {
        text_seen = true;
      } else {
        ws[i].fail("kvheap adds at most one special token, before the text; got " + item.dump());
      }
    }
    if (!text_seen) ws.fail("has no Sequence (the text itself)");
    if (!bos.empty()) {
      const Where wt = w / "special_tokens" / bos;
      const json& special =
          object_at(object_at(j, "special_tokens", w), bos.c_str(), w / "special_tokens");
      const json* ids = member(special, "ids");
      if (ids == nullptr || !ids->is_array() || ids->size() != 1)
        (wt / "ids").fail("expected one id");
      parts.bos_id = get_id((*ids)[0], wt / "ids");
    }
  } else {
    (w / "type")
        .fail(fmt::format("'{}' is not supported; kvheap reads the post-processors "
                          "TemplateProcessing, ByteLevel and Sequence",
                          type));
  }
}

void read_decoder(const json& j, const Where& w, BpeParts& parts) {
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    const json* list = member(j, "decoders");
    if (list == nullptr || !list->is_array()) (w / "decoders").fail("expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      read_decoder((*list)[i], (w / "decoders")[i], parts);
  } else if (type == "ByteLevel") {
    if (!parts.byte_level) w.fail("a ByteLevel decoder needs a ByteLevel pre-tokenizer");
  } else if (type == "Replace") {
    const auto [from, regex] = pattern_of(j, w);
    if (regex || from.empty() || get_string(j, "content", w, nullptr) != " ")
      w.fail("kvheap supports Replace of a String marker by \" \" only, got " + j.dump());
    parts.space_marker = from;
  } else if (type == "ByteFallback") {
    parts.decode_byte_tokens = true;
  } else if (type == "Fuse") {
    // Joining the pieces is what decoding does anyway.
  } else if (type == "Strip") {
    if (get_string(j, "content", w, nullptr) != " " || !member(j, "stop") ||
        (*member(j, "stop")) != 0 || !member(j, "start") ||
        !member(j, "start")->is_number_unsigned())
      w.fail("kvheap supports Strip of leading spaces only (content \" \", stop 0), got " +
             j.dump());
    parts.strip_leading_spaces = std::min(member(j, "start")->get<int>(), 16);
  } else if (type == "Metaspace") {
    parts.space_marker = get_string(j, "replacement", w, "\u2581");
    const std::string scheme = get_string(
        j, "prepend_scheme", w, get_bool(j, "add_prefix_space", w, true) ? "always" : "never");
    parts.strip_leading_spaces = scheme == "never" ? 0 : 1;
  } else {
    (w / "type")
        .fail(fmt::format("'{}' is not supported; kvheap reads the decoders ByteLevel, "
                          "Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence",
                          type));
  }
}

// The byte-level vocabulary's text of a token -> its raw bytes.
std::string from_byte_level(const std::string& token, const Where& w) {
  std::string why;
  std::optional<std::string> bytes = bytes_of_byte_level(token, &why);
  if (!bytes) w.fail(why);
  return std::move(*bytes);
}

void read_model(const json& root, const Where& top, BpeParts& parts) {
  const Where w = top / "model";
  const json& model = object_at(root, "model", top);
  const std::string type = get_string(model, "type", w, "BPE");
  if (type != "BPE")
    (w / "type")
        .fail(fmt::format("'{}' is not supported; kvheap reads BPE tokenizers "
                          "(byte-level, or SentencePiece-style with byte_fallback)",
                          type));
  if (const json* d = member(model, "dropout");
      d != nullptr && !(d->is_number() && d->get<double>() == 0.0))
    (w / "dropout").fail("BPE dropout is for training; expected null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!get_string(model, key, w, "").empty()) (w / key).fail("is not supported; expected null");
  parts.byte_fallback = get_bool(model, "byte_fallback", w, false);
  parts.ignore_merges = get_bool(model, "ignore_merges", w, false);
  parts.fuse_unk = get_bool(model, "fuse_unk", w, false);

  const Where wv = w / "vocab";
  const json& vocab = object_at(model, "vocab", w);
  std::unordered_map<std::string, int> id_of;  // as the file writes the token
  id_of.reserve(vocab.size());
  std::unordered_map<int, const std::string*> text_of;
  for (const auto& [text, id_json] : vocab.items()) {
    const int id = get_id(id_json, wv / text);
    const auto [it, fresh] = text_of.emplace(id, &text);
    if (!fresh)
      wv.fail(fmt::format("tokens {:?} and {:?} both have id {}; expected one token per id",
                          *it->second, text, id));
    id_of.emplace(text, id);
    if (static_cast<std::size_t>(id) >= parts.tokens.size()) {
      parts.tokens.resize(static_cast<std::size_t>(id) + 1);
      parts.present.resize(static_cast<std::size_t>(id) + 1, 0);
    }
    parts.tokens[static_cast<std::size_t>(id)] =
        parts.byte_level ? from_byte_level(text, wv / text) : text;
    parts.present[static_cast<std::size_t>(id)] = 1;
  }
  if (const json* unk = member(model, "unk_token")) {
    if (!unk->is_string()) (w / "unk_token").fail("expected a string or null");
    const auto it = id_of.find(unk->get<std::string>());
    if (it == id_of.end())
      (w / "unk_token").fail(fmt::format("{:?} is not in model.vocab", unk->get<std::string>()));
    parts.unk_id = it->second;
  }

  const json* merges = member(model, "merges");
  if (merges == nullptr || !merges->is_array()) (w / "merges").fail("missing or not an array");
  parts.merges.reserve(merges->size());
  std::unordered_map<std::uint64_t, std::size_t> first_seen;
  for (std::size_t rank = 0; rank < merges->size(); ++rank) {
    const Where wm = (w / "merges")[rank];
    const json& m = (*merges)[rank];
    std::string left, right;
    if (m.is_string()) {  // "left right": tokens never hold a plain space in these vocabularies
      const std::string& s = m.get_ref<const std::string&>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        wm.fail(fmt::format("{:?} is not two tokens separated by one space", s));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      wm.fail("expected \"left right\" or [\"left\", \"right\"], got " + m.dump());
    }
    const auto l = id_of.find(left), r = id_of.find(right), merged = id_of.find(left + right);
    for (const auto& [it, name] : {std::pair{l, &left}, std::pair{r, &right}})
      if (it == id_of.end()) wm.fail(fmt::format("names {:?}, which is not in model.vocab", *name));
    if (merged == id_of.end())
      wm.fail(fmt::format("merges {:?} and {:?} into {:?}, which is not in model.vocab", left,
                          right, left + right));
    const std::uint64_t key =
        (static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(r->second);
    if (const auto [it, fresh] = first_seen.emplace(key, rank); !fresh)
      wm.fail(fmt::format("repeats model.merges[{}] ({:?} {:?}); expected each merge once",
                          it->second, left, right));
    parts.merges.emplace(key, PairMerge{static_cast<double>(rank), merged->second});
  }
}

void read_added_tokens(const json& root, const Where& top, BpeParts& parts) {
  const json* list = member(root, "added_tokens");
  if (list == nullptr) return;
  const Where w = top / "added_tokens";
  if (!list->is_array()) w.fail("expected an array");
  std::unordered_set<std::string> seen;
  std::unordered_map<int, std::size_t> by_id;  // id -> the entry that took it
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const Where wi = w[i];
    if (!t.is_object()) wi.fail("expected a JSON object, got " + t.dump());
    AddedToken a;
    a.content = get_string(t, "content", wi, nullptr);
    const json* id = member(t, "id");
    if (id == nullptr) (wi / "id").fail("missing");
    a.id = get_id(*id, wi / "id");
    a.special = get_bool(t, "special", wi, false);
    a.normalized = get_bool(t, "normalized", wi, !a.special);
    if (a.content.empty()) (wi / "content").fail("is empty");
    if (!utf8_valid(a.content)) (wi / "content").fail("is not UTF-8");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (get_bool(t, key, wi, false))
        (wi / key).fail(fmt::format("true is not supported ({:?})", a.content));
    if (!seen.insert(a.content).second)
      (wi / "content").fail(fmt::format("{:?} is added twice", a.content));
    // One id, one text: otherwise encoding gives an id whose decoding is another token's text.
    if (const auto [it, fresh] = by_id.emplace(a.id, i); !fresh)
      (wi / "id").fail(
          fmt::format("{} is also added_tokens[{}]'s ({:?}); expected one token per id", a.id,
                      it->second, parts.added[it->second].content));
    const auto at = static_cast<std::size_t>(a.id);
    if (at < parts.present.size() && parts.present[at] != 0 && parts.tokens[at] != a.content)
      (wi / "id").fail(
          fmt::format("{} is model.vocab's {:?}, not {:?}; expected an added token "
                      "to keep its vocabulary entry's id and text, or a new id",
                      a.id, parts.tokens[at], a.content));
    parts.added.push_back(std::move(a));
  }
}

}  // namespace

std::optional<std::string> bytes_of_byte_level(std::string_view token, std::string* why) {
  static const std::unordered_map<char32_t, char> kByteOf = [] {
    std::unordered_map<char32_t, char> m;
    const auto& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) m[alphabet[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t n = utf8_char_length(token, i);
    if (n == 0) {
      *why = fmt::format("token {:?} is not UTF-8", token);
      return std::nullopt;
    }
    char32_t cp = static_cast<unsigned char>(token[i]) & (n == 1   ? 0x7F
                                                          : n == 2 ? 0x1F
                                                          : n == 3 ? 0x0F
                                                                   : 0x07);
    for (std::size_t k = 1; k < n; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
    const auto it = kByteOf.find(cp);
    if (it == kByteOf.end()) {
      *why = fmt::format(
          "token {:?} has the character U+{:04X}, which is not in the byte-level alphabet", token,
          static_cast<std::uint32_t>(cp));
      return std::nullopt;
    }
    out += it->second;
    i += n;
  }
  return out;
}

const std::array<char32_t, 256>& byte_level_alphabet() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 stands for itself; the rest (controls, space, NBSP, soft hyphen) moves
      // to 256 and up, so every token prints as visible characters.
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

BpeParts parse_tokenizer_json(std::string_view text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("tokenizer.json '{}' is not valid JSON: {}", path, e.what()));
  }
  const Where top{path, ""};
  if (!root.is_object())
    throw InputError(
        fmt::format("tokenizer.json '{}' must hold a JSON object, got {}", path, root.type_name()));
  BpeParts parts;
  parts.source = path;
  parts.format = "tokenizer.json";
  // The pre-tokenizer first: whether it is byte-level decides how the vocabulary reads.
  if (const json* p = member(root, "pre_tokenizer"))
    read_pre_tokenizer(*p, top / "pre_tokenizer", parts);
  if (const json* n = member(root, "normalizer")) read_normalizer(*n, top / "normalizer", parts);
  read_model(root, top, parts);
  read_added_tokens(root, top, parts);
  if (const json* p = member(root, "post_processor"))
    read_post_processor(*p, top / "post_processor", parts);
  const json* d = member(root, "decoder");
  if (d == nullptr) (top / "decoder").fail("missing; kvheap needs it to print text");
  read_decoder(*d, top / "decoder", parts);
  if (!parts.byte_level && parts.space_marker.empty() && !parts.byte_fallback)
    (top / "pre_tokenizer")
        .fail(
            "neither byte-level nor SentencePiece-style (no ByteLevel "
            "pre-tokenizer, no \"▁\" decoder, no byte_fallback); kvheap "
            "reads those two kinds of BPE");
  return parts;
}

std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& path) {
  const std::string text =
      read_regular_file(path, "tokenizer", "a Hugging Face tokenizer.json", kMaxTokenizerJsonBytes);
  return std::make_unique<BpeTokenizer>(parse_tokenizer_json(text, path));
}

}  // namespace kvheap
