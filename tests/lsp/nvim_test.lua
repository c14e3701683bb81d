-- The Neovim test: Neovim's built-in LSP client drives `tsr lsp` on example files. Run by
-- tests/lsp/run_nvim_test.py through init.lua; writes one line per check to stdout, ends with
-- `N passed, N failed` and quits with a non-zero code on failure.
local root = vim.env.TSR_ROOT
local tmp = vim.fn.tempname()
vim.fn.mkdir(tmp, "p")
local passed, failed = 0, 0

local function out(s)
  io.stdout:write(s .. "\n")
  io.stdout:flush()
end

local function check(cond, what, detail)
  if cond then
    passed = passed + 1
    out("ok   " .. what)
  else
    failed = failed + 1
    out("FAIL " .. what .. (detail and (": " .. detail) or ""))
  end
  return cond
end

-- Every publishDiagnostics the client receives, by URI: {version, count}.
local published = {}
local default_publish = vim.lsp.handlers["textDocument/publishDiagnostics"]
vim.lsp.handlers["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
  published[result.uri] = { version = result.version, count = #result.diagnostics }
  return default_publish(err, result, ctx, config)
end

local function write(name, lines)
  local path = tmp .. "/" .. name
  vim.fn.writefile(lines, path)
  return path
end

local function open(path)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  check(vim.bo[buf].filetype == "tessera", "filetype of " .. vim.fn.fnamemodify(path, ":t"))
  local uri = vim.uri_from_bufnr(buf)
  local ok = vim.wait(15000, function()
    return published[uri] ~= nil
  end, 20)
  check(ok, "diagnostics published for " .. vim.fn.fnamemodify(path, ":t"))
  return buf, uri
end

local function find(buf, needle)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    local c = l:find(needle, 1, true)
    if c then
      return i - 1, c - 1 -- 0-based line, byte column
    end
  end
  error("not found: " .. needle)
end

local function hover_at(buf, line, col)
  vim.api.nvim_win_set_cursor(0, { line + 1, col })
  local params = vim.lsp.util.make_position_params()
  local res = vim.lsp.buf_request_sync(buf, "textDocument/hover", params, 10000)
  for _, r in pairs(res or {}) do
    if r.result and r.result.contents then
      return r.result.contents.value or ""
    end
  end
  return ""
end

local function run()
  -- 1. Diagnostics at the right ranges, in bytes as Neovim shows them (the server speaks UTF-16).
  local bad = write("matmul.tsr", {
    "@jit",
    'def project(x: Tensor["B", "D", f32], w: Tensor["H", "N", f32]) -> Tensor["B", "N", f32]:',
    "    return x @ w",
  })
  local buf = open(bad)
  vim.wait(5000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
  local d = vim.diagnostic.get(buf)
  check(#d == 1, "one diagnostic in matmul.tsr", vim.inspect(d))
  if d[1] then
    check(d[1].lnum == 2 and d[1].col == 11 and d[1].end_lnum == 2 and d[1].end_col == 16,
      "E0302 under `x @ w`", string.format("%d:%d-%d:%d", d[1].lnum, d[1].col, d[1].end_lnum, d[1].end_col))
    check(d[1].code == "E0302" and d[1].message:find("matmul inner dimensions differ", 1, true) ~= nil,
      "code and message", (d[1].code or "nil") .. " " .. d[1].message)
    check(d[1].severity == vim.diagnostic.severity.ERROR, "severity error")
  end

  local utf = write("utf16.tsr", { "def main():", '    print("😀😀é", undefined_name)' })
  buf = open(utf)
  vim.wait(5000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
  d = vim.diagnostic.get(buf)
  local line, col = find(buf, "undefined_name")
  check(#d == 1 and d[1].lnum == line and d[1].col == col and d[1].end_col == col + #"undefined_name",
    "range after non-BMP characters", vim.inspect(d[1] and { d[1].lnum, d[1].col, d[1].end_col }))

  -- 2. Editing through Neovim (incremental didChange): fix the error, then bring it back.
  local uri = vim.uri_from_bufnr(buf)
  vim.api.nvim_buf_set_text(buf, line, col, line, col + #"undefined_name", { "1" })
  local ok = vim.wait(10000, function() return #vim.diagnostic.get(buf) == 0 end, 20)
  check(ok, "edit clears the diagnostic")
  vim.api.nvim_buf_set_text(buf, line, col, line, col + 1, { "other_name" })
  ok = vim.wait(10000, function()
    local dd = vim.diagnostic.get(buf)
    return #dd == 1 and dd[1].col == col and dd[1].message:find("other_name", 1, true) ~= nil
  end, 20)
  check(ok, "edit brings a new diagnostic at the same column", vim.inspect(vim.diagnostic.get(buf)))

  -- 3. Hover text on an example.
  buf = open(root .. "/examples/transformer_block.tsr")
  check(#vim.diagnostic.get(buf) == 0, "transformer_block.tsr checks clean")
  line, col = find(buf, "x: Tensor")
  local h = hover_at(buf, line, col)
  check(h:find('x: Tensor["B", "S", "D", bf16 @accum(f32)]', 1, true) ~= nil, "hover on a parameter", h)
  check(h:find("policy: `@accum(f32)`", 1, true) ~= nil, "hover shows the policy", h)
  line, col = find(buf, "h = nn.layer_norm")
  h = hover_at(buf, line, col)
  check(h:find('h: Tensor["B", "S", "D", bf16 @accum(f32)]', 1, true) ~= nil, "hover on a binding", h)
  line, col = find(buf, "def block")
  h = hover_at(buf, line, col + 4)
  check(h:find("graph function", 1, true) ~= nil and h:find("block(x: Tensor[", 1, true) ~= nil, "hover on a function", h)

  -- 4. Go to definition: nn.layer_norm jumps into the stdlib.
  line, col = find(buf, "nn.layer_norm(x)")
  vim.api.nvim_win_set_cursor(0, { line + 1, col + 3 })
  vim.lsp.buf.definition()
  ok = vim.wait(10000, function()
    return vim.api.nvim_buf_get_name(0):match("stdlib/nn%.tsr$") ~= nil
  end, 20)
  check(ok, "definition opens stdlib/nn.tsr", vim.api.nvim_buf_get_name(0))
  if ok then
    local target = 0
    for i, l in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
      if l:find("^def layer_norm%(") then target = i end
    end
    local cur = vim.api.nvim_win_get_cursor(0)
    check(cur[1] == target and cur[2] == 4, "cursor on `def layer_norm`", vim.inspect(cur) .. " want line " .. target)
  end

  -- 5. Completion of module members, typed into a copy of the example.
  local copy = write("block.tsr", vim.fn.readfile(root .. "/examples/transformer_block.tsr"))
  buf = open(copy)
  line = find(buf, "    return x + nn.gelu")
  vim.api.nvim_buf_set_lines(buf, line, line, false, { "    y = nn." })
  vim.api.nvim_win_set_cursor(0, { line + 1, 0 })
  -- The client sends didChange after its own debounce; the check of the new text says it arrived.
  vim.wait(10000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
  -- (In normal mode the cursor cannot stand after the last character, where typing would.)
  local params = vim.lsp.util.make_position_params()
  params.position.character = #"    y = nn."
  local res = vim.lsp.buf_request_sync(buf, "textDocument/completion", params, 10000)
  local labels = {}
  for _, r in pairs(res or {}) do
    for _, item in ipairs((r.result or {}).items or r.result or {}) do
      labels[item.label] = true
    end
  end
  check(labels["layer_norm"] and labels["softmax"], "completion after `nn.`", vim.inspect(vim.tbl_keys(labels)))
end

local ok, err = pcall(run)
if not ok then
  failed = failed + 1
  out("FAIL the test raised: " .. tostring(err))
end
out(string.format("%d passed, %d failed", passed, failed))
for _, c in pairs(vim.lsp.get_active_clients()) do
  c.stop()
end
vim.wait(2000, function() return #vim.lsp.get_active_clients() == 0 end, 20)
vim.cmd(failed == 0 and "qall!" or "cquit!")
