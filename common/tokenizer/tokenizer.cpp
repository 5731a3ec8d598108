// TextStream: assembling the output bytes of tokens into whole UTF-8 characters.
#include "common/tokenizer/tokenizer.hpp"

#include "common/tokenizer/utf8.hpp"

namespace kvheap {

std::string TextStream::push(int id) {
  // Special tokens print nothing and leave the start of the text where it was: the first word
  // after a leading BOS still drops the word-start space the encoder added.
  held_ += tok_->piece_bytes(prev_, id);
  if (!tok_->is_special(id)) prev_ = id;
  const std::size_t keep = utf8_incomplete_tail(held_);
  std::string out = utf8_replace_invalid(std::string_view(held_).substr(0, held_.size() - keep));
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::finish() {
  std::string out = utf8_replace_invalid(held_);
  held_.clear();
  return out;
}

}  // namespace kvheap
