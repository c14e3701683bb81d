#!/usr/bin/env bash
# A stand-in for tsrc in the negative controls (tests/CMakeLists.txt): any --emit=... kills this
# process with SIGSEGV, as a crashing compiler would die; everything else runs the real tsrc
# ($TSR_REAL_TSRC). A test that drives it must report a crash as a failure.
for a in "$@"; do
  case "$a" in --emit=*) kill -SEGV $$ ;; esac
done
exec "$TSR_REAL_TSRC" "$@"
