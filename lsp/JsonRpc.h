// JSON-RPC 2.0 framing of the Language Server Protocol: each message is a header block
// ("Content-Length: N\r\n", optionally "Content-Type: ...\r\n", then "\r\n") followed by N bytes
// of JSON. This layer only moves message bodies; lsp/Server.cpp parses them.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

namespace tsr::lsp {

/// Reads framed messages from a file descriptor.
class MessageReader {
public:
  explicit MessageReader(int fd, size_t maxBody = size_t(256) << 20) : fd_(fd), maxBody_(maxBody) {}

  enum class Status {
    Ok,        // `body` holds one message
    BadHeader, // input that was not a message (garbage, a header block without a usable
               // Content-Length, a body over the limit) was skipped; `error` says what
    Eof,       // the stream ended (a partial message at the end is dropped)
  };
  Status read(std::string &body, std::string &error);

private:
  bool fill();                         // reads more bytes into buf_; false at end of stream
  bool readLine(std::string &line);    // one header line without its "\r\n"
  bool discard(size_t n);

  int fd_;
  size_t maxBody_;
  std::string buf_;
  size_t pos_ = 0;
  std::string pendingError_; // skipped garbage, reported by the next read()
};

/// Writes framed messages to a file descriptor; safe to call from several threads.
class MessageWriter {
public:
  explicit MessageWriter(int fd) : fd_(fd) {}
  /// False once the descriptor fails (the client went away).
  bool write(const std::string &body);

private:
  int fd_;
  std::mutex mu_;
  bool broken_ = false;
};

} // namespace tsr::lsp
