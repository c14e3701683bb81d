// The VS Code client of `tsr lsp`: starts the server for .tsr files and restarts it when its
// settings change. Everything the editor shows (diagnostics, hover, definitions, symbols,
// completion, signature help) comes from the server.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function serverOptions() {
  const cfg = vscode.workspace.getConfiguration("tessera");
  const command = cfg.get("server.path", "tsr");
  const env = Object.assign({}, process.env, cfg.get("server.env", {}));
  // stdio is the only transport `tsr lsp` speaks.
  return { command, args: ["lsp"], options: { env } };
}

function clientOptions() {
  const cfg = vscode.workspace.getConfiguration("tessera");
  return {
    documentSelector: [
      { scheme: "file", language: "tessera" },
      { scheme: "untitled", language: "tessera" },
    ],
    initializationOptions: { debounceMs: cfg.get("server.debounceMs", 50) },
    synchronize: {
      // A saved or changed module may be imported by the open files: the server checks them again.
      fileEvents: vscode.workspace.createFileSystemWatcher("**/*.tsr"),
    },
    outputChannelName: "Tessera",
  };
}

async function start() {
  client = new LanguageClient("tessera", "Tessera", serverOptions(), clientOptions());
  await client.start();
}

async function activate(context) {
  await start();
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("tessera.server")) return;
      if (client) await client.stop();
      await start();
    }),
    vscode.commands.registerCommand("tessera.restartServer", async () => {
      if (client) await client.stop();
      await start();
    })
  );
}

async function deactivate() {
  if (client) await client.stop();
}

module.exports = { activate, deactivate };
