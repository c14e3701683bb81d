#include "lsp/Server.h"

#include "lsp/CheckWorker.h"
#include "lsp/Documents.h"
#include "lsp/Features.h"
#include "lsp/JsonRpc.h"

#include <nlohmann/json.hpp>

#include <csignal>
#include <malloc.h>
#include <cstdio>
#include <fstream>
#include <iostream>

namespace tsr::lsp {

namespace {

// JSON-RPC and LSP error codes.
enum ErrorCode {
  ParseError = -32700,
  InvalidRequest = -32600,
  MethodNotFound = -32601,
  InvalidParams = -32602,
  InternalError = -32603,
  ServerNotInitialized = -32002,
  RequestCancelled = -32800,
};

struct ProtocolError {
  int code;
  std::string message;
};

long vmRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

class Server {
public:
  Server(int inFd, int outFd, const ServerOptions &o) : reader_(inFd), writer_(outFd), opts_(o) {}

  int run() {
    worker_ = std::make_unique<CheckWorker>(
        opts_.check, std::chrono::milliseconds(opts_.debounceMs),
        [this](const std::string &uri) { return fetch(uri); },
        [this](std::shared_ptr<Analysis> a) { return onChecked(std::move(a)); });
    int code = 1; // the input ended without `exit`
    std::string body, error;
    for (;;) {
      auto st = reader_.read(body, error);
      if (st == MessageReader::Status::Eof) break;
      if (st == MessageReader::Status::BadHeader) {
        log("dropped input: " + error);
        sendError(nullptr, ParseError, error);
        continue;
      }
      if (auto exit = handle(body)) {
        code = *exit;
        break;
      }
    }
    worker_->stop();
    return code;
  }

private:
  struct Deferred {
    Json id;
    std::string method;
    Json params;
    std::string uri;
  };

  // ---- output ----------------------------------------------------------------------------------

  void send(const Json &j) {
    writer_.write(j.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  void reply(const Json &id, Json result) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
  }
  void sendError(const Json &id, int code, const std::string &message) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
  }
  void notify(const std::string &method, Json params) {
    send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
  }
  void log(const std::string &s) {
    if (opts_.verbose) std::fprintf(stderr, "[tsr lsp] %s\n", s.c_str());
  }

  // ---- dispatch --------------------------------------------------------------------------------

  /// Handles one message; returns the exit code when it was `exit`.
  std::optional<int> handle(const std::string &body) {
    Json msg;
    try {
      msg = Json::parse(body);
    } catch (const Json::exception &e) {
      log(std::string("parse error: ") + e.what());
      sendError(nullptr, ParseError, std::string("parse error: ") + e.what());
      return std::nullopt;
    }
    if (!msg.is_object()) {
      sendError(nullptr, InvalidRequest, msg.is_array() ? "batches are not part of the Language Server Protocol"
                                                        : "a message must be a JSON object");
      return std::nullopt;
    }
    bool hasId = msg.contains("id");
    Json id = hasId ? msg["id"] : Json();
    if (hasId && !id.is_number_integer() && !id.is_string() && !id.is_null()) {
      sendError(nullptr, InvalidRequest, "the id must be a number or a string");
      return std::nullopt;
    }
    auto m = msg.find("method");
    if (m == msg.end()) {
      // A response to a request of ours (the server sends none that need answers): ignored.
      if (hasId && (msg.contains("result") || msg.contains("error"))) return std::nullopt;
      sendError(id, InvalidRequest, "a message without a method");
      return std::nullopt;
    }
    if (!m->is_string()) {
      if (hasId) sendError(id, InvalidRequest, "the method must be a string");
      return std::nullopt;
    }
    std::string method = *m;
    Json params = msg.contains("params") ? msg["params"] : Json::object();
    bool isRequest = hasId;

    if (method == "exit") return shutdown_ ? 0 : 1;
    if (!initialized_ && method != "initialize") {
      // Before initialize: requests get an error, notifications are dropped.
      if (isRequest) sendError(id, ServerNotInitialized, "the server is not initialized");
      return std::nullopt;
    }
    if (shutdown_) {
      if (isRequest) sendError(id, InvalidRequest, "the server is shutting down");
      return std::nullopt;
    }
    try {
      if (isRequest) request(id, method, params);
      else notification(method, params);
    } catch (const ProtocolError &e) {
      if (isRequest) sendError(id, e.code, e.message);
      else log("ignored " + method + ": " + e.message);
    } catch (const Json::exception &e) {
      if (isRequest) sendError(id, InvalidParams, std::string("invalid params: ") + e.what());
      else log("ignored " + method + ": " + e.what());
    } catch (const std::exception &e) {
      if (isRequest) sendError(id, InternalError, std::string("internal error: ") + e.what());
      else log("error in " + method + ": " + e.what());
    }
    return std::nullopt;
  }

  static const Json &field(const Json &j, const char *name) {
    if (!j.is_object()) throw ProtocolError{InvalidParams, "params must be an object"};
    auto it = j.find(name);
    if (it == j.end()) throw ProtocolError{InvalidParams, std::string("missing `") + name + "`"};
    return *it;
  }
  static std::string uriOf(const Json &params) {
    const Json &td = field(params, "textDocument");
    const Json &u = field(td, "uri");
    if (!u.is_string()) throw ProtocolError{InvalidParams, "textDocument.uri must be a string"};
    return u.get<std::string>();
  }
  static Position positionOf(const Json &params) {
    const Json &p = field(params, "position");
    int64_t line = field(p, "line").get<int64_t>(), ch = field(p, "character").get<int64_t>();
    if (line < 0 || ch < 0) throw ProtocolError{InvalidParams, "negative position"};
    auto clamp = [](int64_t v) { return static_cast<uint32_t>(std::min<int64_t>(v, UINT32_MAX)); };
    return {clamp(line), clamp(ch)};
  }

  void request(const Json &id, const std::string &method, const Json &params) {
    if (method == "initialize") {
      if (initialized_) throw ProtocolError{InvalidRequest, "initialize was already received"};
      initialize(params);
      reply(id, capabilities());
      return;
    }
    if (method == "shutdown") {
      shutdown_ = true;
      reply(id, nullptr);
      return;
    }
    if (method == "textDocument/hover" || method == "textDocument/definition" ||
        method == "textDocument/documentSymbol") {
      std::string uri = uriOf(params);
      if (method != "textDocument/documentSymbol") positionOf(params); // validated now, used later
      std::shared_ptr<const Analysis> a;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const Document *doc = docs_.get(uri);
        if (!doc) {
          reply(id, method == "textDocument/documentSymbol" ? Json::array() : Json());
          return;
        }
        auto it = analyses_.find(uri);
        if (it == analyses_.end() || it->second->version != doc->version) {
          // Answered from the check of this version, when it is done.
          deferred_.push_back({id, method, params, uri});
          return;
        }
        a = it->second;
      }
      answer(id, method, params, *a);
      return;
    }
    if (method == "textDocument/completion" || method == "textDocument/signatureHelp") {
      std::string uri = uriOf(params);
      Position pos = positionOf(params);
      std::shared_ptr<const Analysis> a;
      Document doc;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const Document *d = docs_.get(uri);
        if (!d) {
          reply(id, nullptr);
          return;
        }
        doc = *d;
        auto it = analyses_.find(uri);
        if (it != analyses_.end()) a = it->second;
      }
      // The text as typed, with the scopes of the latest check (the text under the cursor is
      // usually incomplete and may not parse).
      if (method == "textDocument/completion") reply(id, completion(a.get(), doc, pos, prefs_));
      else reply(id, signatureHelp(a.get(), doc, pos, prefs_));
      return;
    }
    if (method == "tessera/status") {
      auto s = worker_->stats();
      std::lock_guard<std::mutex> lock(mu_);
      reply(id, {{"checks", s.checks}, {"superseded", s.superseded}, {"cancelled", s.cancelled}, {"lastCheckMs", s.lastMs},
                 {"parsedStatements", s.parse.parsed}, {"reusedStatements", s.parse.reused},
                 {"tailParses", s.parse.wholeTail}, {"cachedStatements", s.parse.entries},
                 {"published", published_}, {"openDocuments", docs_.all().size()}, {"vmRssKb", vmRssKb()},
                 {"heapInUseKb", mallinfo2().uordblks / 1024}});
      return;
    }
    throw ProtocolError{MethodNotFound, "unknown method `" + method + "`"};
  }

  void notification(const std::string &method, const Json &params) {
    if (method == "initialized") return;
    if (method == "textDocument/didOpen") {
      const Json &td = field(params, "textDocument");
      std::string uri = field(td, "uri").get<std::string>();
      std::string text = field(td, "text").get<std::string>();
      int64_t version = td.contains("version") && td["version"].is_number_integer() ? td["version"].get<int64_t>() : 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        docs_.open(uri, std::move(text), version);
        analyses_.erase(uri);
      }
      worker_->schedule(uri, true);
      return;
    }
    if (method == "textDocument/didChange") {
      std::string uri = uriOf(params);
      const Json &td = field(params, "textDocument");
      std::optional<int64_t> version;
      if (td.contains("version") && td["version"].is_number_integer()) version = td["version"].get<int64_t>();
      std::vector<TextChange> changes;
      for (const Json &c : field(params, "contentChanges")) {
        TextChange tc;
        tc.text = field(c, "text").get<std::string>();
        if (c.contains("range") && !c["range"].is_null()) {
          const Json &r = c["range"];
          auto pos = [](const Json &p) {
            int64_t l = field(p, "line").get<int64_t>(), ch = field(p, "character").get<int64_t>();
            if (l < 0 || ch < 0) throw ProtocolError{InvalidParams, "negative position"};
            return Position{static_cast<uint32_t>(std::min<int64_t>(l, UINT32_MAX)),
                            static_cast<uint32_t>(std::min<int64_t>(ch, UINT32_MAX))};
          };
          tc.range = std::pair{pos(field(r, "start")), pos(field(r, "end"))};
        }
        changes.push_back(std::move(tc));
      }
      DocumentStore::ChangeResult res;
      {
        std::lock_guard<std::mutex> lock(mu_);
        res = docs_.change(uri, version, changes);
      }
      if (res == DocumentStore::ChangeResult::Applied) worker_->schedule(uri);
      else if (res == DocumentStore::ChangeResult::StaleVersion) log("ignored an out-of-order change of " + uri);
      else log("ignored a change of " + uri + ", which is not open");
      return;
    }
    if (method == "textDocument/didClose") {
      std::string uri = uriOf(params);
      std::vector<Deferred> waiting;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!docs_.close(uri)) return;
        analyses_.erase(uri);
        worker_->forget(uri);
        takeDeferred(uri, waiting);
        notify("textDocument/publishDiagnostics", {{"uri", uri}, {"diagnostics", Json::array()}});
      }
      for (auto &d : waiting) reply(d.id, d.method == "textDocument/documentSymbol" ? Json::array() : Json());
      return;
    }
    if (method == "textDocument/didSave" || method == "workspace/didChangeWatchedFiles" ||
        method == "workspace/didChangeConfiguration") {
      // A saved file may be imported by the open documents: check them all again.
      std::vector<std::string> uris;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto &[u, d] : docs_.all()) uris.push_back(u);
      }
      for (auto &u : uris) worker_->schedule(u, true);
      return;
    }
    if (method == "$/cancelRequest") {
      const Json &cid = field(params, "id");
      std::optional<Deferred> cancelled;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = deferred_.begin(); it != deferred_.end(); ++it)
          if (it->id == cid) {
            cancelled = std::move(*it);
            deferred_.erase(it);
            break;
          }
      }
      if (cancelled) sendError(cancelled->id, RequestCancelled, "cancelled");
      return;
    }
    // Other notifications ($/setTrace, workspace/..., unknown ones) need nothing: the protocol
    // says unknown notifications are ignored.
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  void initialize(const Json &params) {
    initialized_ = true;
    if (!params.is_object()) return;
    try {
      const Json &fmt = params.at("capabilities").at("textDocument").at("hover").at("contentFormat");
      if (fmt.is_array() && !fmt.empty()) prefs_.markdown = fmt[0] == "markdown";
    } catch (const Json::exception &) {
    }
    if (params.contains("initializationOptions") && params["initializationOptions"].is_object()) {
      const Json &o = params["initializationOptions"];
      if (o.contains("debounceMs") && o["debounceMs"].is_number_integer()) {
        int ms = std::clamp(o["debounceMs"].get<int>(), 0, 5000);
        worker_->setDebounce(std::chrono::milliseconds(ms));
      }
    }
  }

  Json capabilities() const {
    return {{"capabilities",
             {{"positionEncoding", "utf-16"},
              {"textDocumentSync", {{"openClose", true}, {"change", 2}, {"save", {{"includeText", false}}}}},
              {"hoverProvider", true},
              {"definitionProvider", true},
              {"documentSymbolProvider", true},
              {"completionProvider", {{"triggerCharacters", {".", "@"}}, {"resolveProvider", false}}},
              {"signatureHelpProvider", {{"triggerCharacters", {"(", ","}}, {"retriggerCharacters", {","}}}}}},
            {"serverInfo", {{"name", "tsr lsp"}, {"version", "0.1"}}}};
  }

  // ---- checks ----------------------------------------------------------------------------------

  std::optional<CheckInput> fetch(const std::string &uri) {
    std::lock_guard<std::mutex> lock(mu_);
    const Document *d = docs_.get(uri);
    if (!d) return std::nullopt;
    return CheckInput{d->uri, d->path, d->text, d->version};
  }

  void takeDeferred(const std::string &uri, std::vector<Deferred> &out) {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (it->uri == uri) {
        out.push_back(std::move(*it));
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // On the checker thread.
  bool onChecked(std::shared_ptr<Analysis> a) {
    Json diags = diagnosticsJson(*a);
    Json params = {{"uri", a->uri}, {"version", a->version}, {"diagnostics", std::move(diags)}};
    std::vector<Deferred> ready;
    std::shared_ptr<const Analysis> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Document *doc = docs_.get(a->uri);
      if (!doc || doc->version != a->version) {
        log("dropped the check of " + a->uri + " version " + std::to_string(a->version) + ": superseded");
        return false;
      }
      auto &slot = analyses_[a->uri];
      old = std::move(slot);
      slot = a;
      takeDeferred(a->uri, ready);
      ++published_;
      // Published under the lock, so that a didClose cannot slip in between the version check
      // and the notification.
      notify("textDocument/publishDiagnostics", std::move(params));
    }
    log("checked " + a->uri + " version " + std::to_string(a->version) + " in " + std::to_string(a->checkMs) + " ms");
    for (auto &d : ready) {
      try {
        answer(d.id, d.method, d.params, *a);
      } catch (const std::exception &e) {
        sendError(d.id, InternalError, std::string("internal error: ") + e.what());
      }
    }
    return true;
  }

  void answer(const Json &id, const std::string &method, const Json &params, const Analysis &a) {
    if (method == "textDocument/hover") reply(id, hover(a, positionOf(params), prefs_));
    else if (method == "textDocument/definition") reply(id, definition(a, positionOf(params)));
    else reply(id, documentSymbols(a));
  }

  MessageReader reader_;
  MessageWriter writer_;
  ServerOptions opts_;
  bool initialized_ = false, shutdown_ = false; // main thread only
  ClientPrefs prefs_;

  std::mutex mu_; // guards what follows
  DocumentStore docs_;
  std::map<std::string, std::shared_ptr<const Analysis>> analyses_; // the last published check
  std::vector<Deferred> deferred_;
  uint64_t published_ = 0;

  std::unique_ptr<CheckWorker> worker_;
};

} // namespace

int runServer(int inFd, int outFd, const ServerOptions &options) {
  // A client that goes away must end the server through a failed write, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  // One malloc arena for both threads: the checker's memory is then one heap that the idle trim
  // returns whole (and that heapInUseKb in tessera/status accounts for), instead of a second
  // arena holding on to the pages of past checks.
  mallopt(M_ARENA_MAX, 1);
  // Large blocks (document texts, the node vectors of big trees) are mapped and unmapped on their
  // own rather than carved from the heap, where the holes they leave would fragment it.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  Server s(inFd, outFd, options);
  return s.run();
}

} // namespace tsr::lsp
