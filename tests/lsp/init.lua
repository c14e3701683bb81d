-- Neovim (0.7+) configuration for Tessera: `.tsr` files get the filetype `tessera` and the
-- built-in LSP client runs `tsr lsp` for them. Used by the Neovim test (tests/lsp/nvim_test.lua,
-- which this file runs when TSR_NVIM_TEST is set) and shown in docs/editors.md.
--
--   nvim --headless -u tests/lsp/init.lua          (with TSR=/path/to/tsr in the environment)

vim.opt.swapfile = false
vim.opt.shadafile = "NONE"

vim.cmd([[autocmd BufRead,BufNewFile *.tsr setfiletype tessera]])

local tsr = vim.env.TSR or "tsr"
local client_id = nil

local function start()
  if client_id and vim.lsp.get_client_by_id(client_id) then
    return client_id
  end
  client_id = vim.lsp.start_client({
    name = "tsr",
    cmd = { tsr, "lsp" },
    root_dir = vim.fn.getcwd(),
    -- The server checks 50 ms after the last keystroke; 0 checks at once.
    init_options = { debounceMs = 50 },
  })
  return client_id
end

vim.api.nvim_create_autocmd("FileType", {
  pattern = "tessera",
  callback = function(args)
    vim.lsp.buf_attach_client(args.buf, start())
    local opts = { buffer = args.buf }
    vim.keymap.set("n", "K", vim.lsp.buf.hover, opts)
    vim.keymap.set("n", "gd", vim.lsp.buf.definition, opts)
    vim.keymap.set("i", "<C-k>", vim.lsp.buf.signature_help, opts)
    vim.bo[args.buf].omnifunc = "v:lua.vim.lsp.omnifunc"
  end,
})

if vim.env.TSR_NVIM_TEST then
  vim.defer_fn(function()
    dofile(vim.env.TSR_NVIM_TEST)
  end, 0)
end
