# dist_lib.sh — what the suites of tests/dist share (sourced, never run): the
# check line, `make dist` into $tmp/dist, the version and the architectures.
# Before sourcing: cd to the repository, `tmp` a scratch folder, `suite` the
# prefix of the suite's check names (dist, wheel, npm).

check() { if [ "$2" = 1 ]; then echo "ok ${suite}_$1"; else echo "FAIL ${suite}_$1: $3"; fi; }

# make dist into $tmp/dist (a FAIL line and exit 1 when it fails); sets version.
# Arguments go to make (HAVE_ARM64= builds x86-64 only).  Under tests/run.sh
# (BF_DIST_SHARED set: a folder of that run) the first suite's make dist, for
# every architecture, serves the later ones: one tree, one set of files, and
# make dist's ~10 s once per run instead of once per suite.
dist_build() {
  if [ -n "${BF_DIST_SHARED:-}" ]; then
    if [ ! -f "$BF_DIST_SHARED/done" ]; then
      rm -rf "$BF_DIST_SHARED/dist"
      if ! make -s dist DIST="$BF_DIST_SHARED/dist" >"$tmp/make.log" 2>&1; then
        echo "FAIL ${suite}_build: make dist failed: $(tail -5 "$tmp/make.log")"; exit 1
      fi
      touch "$BF_DIST_SHARED/done"
    fi
    cp -a "$BF_DIST_SHARED/dist" "$tmp/dist"; : >>"$tmp/make.log"
  elif ! make -s dist DIST="$tmp/dist" "$@" >"$tmp/make.log" 2>&1; then
    echo "FAIL ${suite}_build: make dist failed: $(tail -5 "$tmp/make.log")"; exit 1
  fi
  version=$(sed -n 's/^#define BFX_VERSION "\(.*\)"/\1/p' ext/sqlite/version.h)
}

# The architectures make dist built: x86_64, and aarch64 with the cross compiler
# (else a skip line); into arches.
dist_arches() {
  arches=x86_64
  if command -v aarch64-linux-gnu-gcc >/dev/null; then arches="x86_64 aarch64"
  else echo "skip ${suite}_aarch64: no aarch64-linux-gnu-gcc (bash .ci/install-cross)"; fi
}
