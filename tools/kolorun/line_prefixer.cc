#include "tools/kolorun/line_prefixer.h"

namespace kolo::kolorun {

void LinePrefixer::emit(std::string_view line) {
  sink_.write(prefix_);
  sink_.write(line);
  sink_.write("\n");
}

void LinePrefixer::feed(std::string_view data) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      while (pending_.size() >= kMaxLine) {
        emit(std::string_view(pending_).substr(0, kMaxLine));
        pending_.erase(0, kMaxLine);
      }
      return;
    }
    if (pending_.empty()) {
      emit(data.substr(0, nl));
    } else {
      pending_.append(data.substr(0, nl));
      emit(pending_);
      pending_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LinePrefixer::finish() {
  if (!pending_.empty()) emit(pending_);
  pending_.clear();
}

}  // namespace kolo::kolorun
