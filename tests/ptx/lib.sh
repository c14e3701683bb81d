# Shared by the PTX checks of tests/ptx/*.sh (sourced): their arguments, the skip without ptxas,
# a work folder, and the pieces of a kernel they read.

# ptx_setup NAME TSRC PTXAS SOURCE_DIR: sets tsrc, ptxas and src; exits 77 (ctest's skip) where
# the CUDA toolkit's ptxas was not found, or 1 under TSR_REQUIRE_PREREQS=1; makes $work, a folder
# removed at exit.
ptx_setup() {
  local name=$1
  tsrc=$2 ptxas=$3 src=$4
  if [[ -z "$ptxas" || "$ptxas" == *NOTFOUND* || ! -x "$ptxas" ]]; then
    if [[ "${TSR_REQUIRE_PREREQS:-}" == 1 ]]; then echo "FAIL $name: ptxas not found"; exit 1; fi
    echo "SKIP $name: the CUDA toolkit's ptxas was not found"; exit 77
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
  trap 'rm -rf "$work"' EXIT
}

# ptx_body KERNEL FILE: the body of KERNEL's .entry in the PTX FILE, to its closing brace (an
# inline asm block's braces, between `// begin inline asm` and `// end inline asm`, are not it).
# Write it to a file before grepping it: `ptx_body | grep -q` under pipefail fails when grep's
# early exit ends awk with SIGPIPE.
ptx_body() {
  awk -v e="$1(" 'index($0, ".entry " e) {p=1} p && /begin inline asm/ {a=1} p && /end inline asm/ {a=0}
                  p && !a && /^}/ {exit} p' "$2"
}

# ptx_spills KERNEL FILE: the spill stores ptxas -v reported for KERNEL in FILE (its stderr).
ptx_spills() { grep -A4 "Function properties for $1\$" "$2" | grep -o '[0-9]* bytes spill stores' | cut -d' ' -f1; }

# ptx_no_spills KERNEL FILE [LABEL]: prints KERNEL's spill stores from FILE and fails (status 1,
# a FAIL line) unless ptxas reported 0 (no report at all fails too).
ptx_no_spills() {
  local n
  n=$(ptx_spills "$1" "$2")
  echo "${3:-$1} spill stores: ${n:-?}"
  [[ "${n:-x}" == 0 ]] || { echo "FAIL: ${3:-$1} spills"; return 1; }
}
