#include "lsp/JsonRpc.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <unistd.h>

namespace tsr::lsp {

namespace {
constexpr size_t kMaxHeaderLine = 64 * 1024;

std::string lower(std::string s) {
  for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}
} // namespace

bool MessageReader::fill() {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    // Keep the buffer from growing with everything ever read.
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

bool MessageReader::readLine(std::string &line) {
  line.clear();
  bool tooLong = false;
  for (;;) {
    size_t nl = buf_.find('\n', pos_);
    if (nl != std::string::npos) {
      if (!tooLong) line.append(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (tooLong) line = std::string(1, '\0'); // never a valid header, never empty
      return true;
    }
    if (!tooLong) {
      line.append(buf_, pos_, std::string::npos);
      if (line.size() > kMaxHeaderLine) { tooLong = true; line.clear(); }
    }
    pos_ = buf_.size();
    if (!fill()) return false;
  }
}

bool MessageReader::discard(size_t n) {
  while (n > 0) {
    if (pos_ == buf_.size() && !fill()) return false;
    size_t take = std::min(n, buf_.size() - pos_);
    pos_ += take;
    n -= take;
  }
  return true;
}

MessageReader::Status MessageReader::read(std::string &body, std::string &error) {
  body.clear();
  error.clear();
  if (!pendingError_.empty()) {
    error = std::move(pendingError_);
    pendingError_.clear();
    return Status::BadHeader;
  }
  std::string line;
  bool sawHeader = false, haveLength = false, badLength = false;
  size_t length = 0;
  auto garbage = [&](const std::string &what) {
    // Input that is not a header: skip it and start looking for a message afresh, so that one
    // bad write from the client costs that write only.
    if (pendingError_.empty()) pendingError_ = "skipped input that is not a message header: '" + what.substr(0, 60) + "'";
    sawHeader = haveLength = badLength = false;
  };
  for (;;) {
    if (!readLine(line)) return Status::Eof;
    if (line.empty()) {
      if (!sawHeader) continue; // stray blank lines between messages
      break;
    }
    // A body that was not followed by a newline runs into the next header ("...}Content-Length").
    size_t at = lower(line).find("content-length:");
    if (at != std::string::npos && at > 0) {
      garbage(line.substr(0, at));
      line.erase(0, at);
    }
    size_t colon = line.find(':');
    bool token = colon != std::string::npos && colon > 0;
    for (size_t i = 0; token && i < colon; ++i) {
      unsigned char c = static_cast<unsigned char>(line[i]);
      token = std::isalnum(c) || c == '-';
    }
    if (!token) {
      garbage(line);
      continue;
    }
    sawHeader = true;
    std::string name = lower(line.substr(0, colon));
    std::string value = trim(line.substr(colon + 1));
    if (name == "content-length") {
      size_t v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || p != value.data() + value.size() || value.empty()) {
        badLength = true;
        error = "Content-Length is not a number: '" + value.substr(0, 40) + "'";
      } else {
        haveLength = true;
        length = v;
      }
    }
    // Other headers (Content-Type) need nothing: the protocol's only encoding is UTF-8.
  }
  if (badLength || !haveLength) {
    if (error.empty()) error = "a header block without Content-Length";
    if (!pendingError_.empty()) { error = pendingError_ + "; " + error; pendingError_.clear(); }
    return Status::BadHeader;
  }
  if (length > maxBody_) {
    error = "a message of " + std::to_string(length) + " bytes is over the limit of " + std::to_string(maxBody_);
    return discard(length) ? Status::BadHeader : Status::Eof;
  }
  while (buf_.size() - pos_ < length)
    if (!fill()) return Status::Eof;
  body.assign(buf_, pos_, length);
  pos_ += length;
  return Status::Ok;
}

bool MessageWriter::write(const std::string &body) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return false;
  std::string msg = "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  msg += body;
  size_t off = 0;
  while (off < msg.size()) {
    ssize_t n = ::write(fd_, msg.data() + off, msg.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      broken_ = true;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

} // namespace tsr::lsp
