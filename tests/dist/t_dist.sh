#!/usr/bin/env bash
# t_dist.sh — the release tarballs of `make dist` (docs/dist.md), built into
# a temporary folder from this tree, then checked as a user gets them:
#   per architecture (x86_64; aarch64 where the cross compiler is installed,
#   .ci/install-cross): the tarball's files are exactly the promised ones and
#   SHA256SUMS verifies; `file` says the architecture; readelf's NEEDED is only
#   the C library (libc, libm, libpthread, libdl, the loader); the dynamic
#   symbols are only the two entry points; the highest GLIBC_x.y the .so needs,
#   read here from the binary, is BUILDINFO's glibc and its manylinux tag;
#   x86_64: with utf8proc and OpenBLAS made unavailable (a mount namespace,
#   unshare -m, that binds /dev/null over every file of those libraries: the
#   development build, which NEEDs libutf8proc.so.2, then fails to load, which
#   shows the hiding works), the tarball's .so loads and fills a handful of
#   texts, on the kernels the CPU has and on the portable set
#   (BERTFILL_KERNELS=openblas: then its products run on blas.c's built-in
#   loops), with the results of the development build;
#   aarch64: the same hidden libraries, an arm64 sqlite3 under
#   qemu-aarch64-static loads the arm64 .so from the tarball and fills the
#   same texts as x86-64's portable set (their top fills; the scores to 1e-3).
#   Under qemu: BERTFILL_WARM_UP=0, one thread and BERTFILL_SHARED_LINGER_MS=0
#   (no lingering leader's thread), no helper thread at all:
#   Debian 12's qemu-user 7.2 hangs in any pthread_create on some hosts
#   (kernel 6.18 here; a five-line C program shows it).
# Skipped with the reason: without unshare rights (not root), without the
# cross compiler, qemu-aarch64-static or the arm64 sqlite3.
set -u
cd "$(dirname "$0")/../.."
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
ARM64_SQLITE3=${ARM64_SQLITE3:-/usr/local/lib/bertfill-arm64/sqlite3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export BERTFILL_SHARED_BATCH_DIR=${BERTFILL_SHARED_BATCH_DIR:-$tmp}
suite=dist
. tests/dist/dist_lib.sh
yes_no() { "$@" && echo 1 || echo 0; }

dist_build
dist_arches

# The texts filled on every architecture: one line per mask, its top fill and score.
texts=("中华人民共[MASK]国" "今天天气很[MASK]。" "我想喝一杯[MASK]。" "他[MASK]在北京工作。"
       "[MASK][MASK]是中国的首都。")
fill_sql() {
  for t in "${texts[@]}"; do
    printf "select token || ' ' || printf('%%.4f', score) from fill_candidates('%s') where rank = 1;\n" "$t"
  done
}
fill_sql >"$tmp/fill.sql"
{ cat "$tmp/fill.sql"; echo "select json_extract(bert_debug(), '\$.blas_core');"; } >"$tmp/fill_debug.sql"
# hidden CMD...: CMD in a mount namespace where every file of utf8proc and
# OpenBLAS (both architectures) reads as empty: they cannot be loaded.
hidden() {
  unshare -m bash -c '
    for f in $(find /usr/lib /lib -name "libutf8proc.so*" -o -name "libopenblas*.so*" -o -name "libblas.so*" 2>/dev/null); do
      [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
    done
    exec "$@"' hidden "$@"
}
can_hide=$(yes_no unshare -m true 2>/dev/null)
[ "$can_hide" = 1 ] || echo "skip dist_hidden: unshare -m is not allowed here (needs root): the loads without utf8proc and OpenBLAS are not checked"

for arch in $arches; do
  tarball=$tmp/dist/bertfill-$version-linux-$arch.tar.gz
  d=$tmp/x/bertfill-$version-linux-$arch
  if [ ! -f "$tarball" ]; then check "${arch}_tarball" 0 "make dist wrote no $tarball"; continue; fi
  mkdir -p "$tmp/x" && tar xzf "$tarball" -C "$tmp/x"
  got=$(cd "$d" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | tr '\n' ' ')
  want=$( (echo BUILDINFO LICENSE README SHA256SUMS bertfill.so licenses/utf8proc licenses/unicode model/MODEL_CARD.md
           git ls-files model/bertfill-zh-tiny) | tr ' ' '\n' | grep . | LC_ALL=C sort | tr '\n' ' ')
  check "${arch}_contents" "$([ "$got" = "$want" ] && echo 1 || echo 0)" "got: $got; want: $want"
  check "${arch}_sha256sums" "$(cd "$d" && yes_no sha256sum --quiet -c SHA256SUMS)" "sha256sum -c failed"
  sums_cover=$(cd "$d" && [ "$(awk '{print $2}' SHA256SUMS | LC_ALL=C sort | tr '\n' ' ')" = \
    "$(echo "$want" | tr ' ' '\n' | grep -vx SHA256SUMS | grep . | LC_ALL=C sort | tr '\n' ' ')" ] && echo 1 || echo 0)
  check "${arch}_sha256sums_cover" "$sums_cover" "SHA256SUMS does not list every file: $(cat "$d/SHA256SUMS")"
  so=$d/bertfill.so
  case $arch in x86_64) want_file="x86-64" ;; aarch64) want_file="ARM aarch64" ;; esac
  check "${arch}_file" "$(file -b "$so" | grep -q "ELF 64-bit LSB shared object, $want_file," && echo 1 || echo 0)" \
    "file says: $(file -b "$so")"
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  bad=$(for l in $needed; do case $l in libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|ld-linux*) ;; *) echo "$l" ;; esac; done)
  check "${arch}_needed" "$([ -z "$bad" ] && [ -n "$needed" ] && echo 1 || echo 0)" "NEEDED: $needed"
  exports=$(nm -D --defined-only "$so" | awk '{print $3}' | LC_ALL=C sort | tr '\n' ' ')
  check "${arch}_exports" "$([ "$exports" = "sqlite3_bertfill_init sqlite3_bertfill_trusted_init " ] && echo 1 || echo 0)" \
    "exported: $(echo "$exports" | wc -w) symbols: $(echo "$exports" | cut -c1-200)"
  glibc=$(readelf -V --wide "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  info_glibc=$(sed -n 's/^glibc=//p' "$d/BUILDINFO"); info_tag=$(sed -n 's/^manylinux=//p' "$d/BUILDINFO")
  check "${arch}_glibc" "$([ -n "$glibc" ] && [ "$glibc" = "$info_glibc" ] && \
    [ "$info_tag" = "manylinux_${glibc/./_}_$arch" ] && echo 1 || echo 0)" \
    "binary needs GLIBC_$glibc, BUILDINFO says glibc=$info_glibc manylinux=$info_tag"
done

if [ "$can_hide" = 1 ]; then
  # the hiding works: the development build (it NEEDs libutf8proc.so.2) cannot load
  hidden sqlite3 :memory: ".load $EXT" "select 1;" >"$tmp/dev_hidden.out" 2>&1
  check hiding_works "$(grep -q 'libutf8proc' "$tmp/dev_hidden.out" && echo 1 || echo 0)" \
    "the development build loaded with utf8proc hidden: $(cat "$tmp/dev_hidden.out")"
  x=$tmp/x/bertfill-$version-linux-x86_64
  (cd "$tmp" && env -u BERTFILL_MODEL sqlite3 -batch -cmd ".load $EXT" :memory: <"$tmp/fill.sql" >"$tmp/dev.out" 2>&1)
  (cd "$tmp" && env -u BERTFILL_MODEL BERTFILL_KERNELS=openblas sqlite3 -batch -cmd ".load $EXT" :memory: <"$tmp/fill.sql" >"$tmp/dev_portable.out" 2>&1)
  for kernels in cpu openblas; do
    envs=(env -u BERTFILL_MODEL); [ $kernels = openblas ] && envs+=(BERTFILL_KERNELS=openblas)
    (cd "$tmp" && hidden "${envs[@]}" sqlite3 -batch -cmd ".load $x/bertfill" :memory: \
       <"$tmp/fill_debug.sql" >"$tmp/x86_$kernels.out" 2>&1)
    ref=$tmp/dev.out; [ $kernels = openblas ] && ref=$tmp/dev_portable.out
    check "x86_64_hidden_fills_$kernels" "$([ -s "$ref" ] && [ "$(sed '$d' "$tmp/x86_$kernels.out")" = "$(cat "$ref")" ] && \
      [ "$(tail -1 "$tmp/x86_$kernels.out")" = builtin ] && echo 1 || echo 0)" \
      "with utf8proc and OpenBLAS hidden: $(tr '\n' '|' <"$tmp/x86_$kernels.out"); development build: $(tr '\n' '|' <"$ref")"
  done
fi

if [[ " $arches " = *" aarch64 "* ]]; then
  if ! command -v qemu-aarch64-static >/dev/null; then
    echo "skip dist_aarch64_fills: no qemu-aarch64-static (bash .ci/install-cross)"
  elif [ ! -x "$ARM64_SQLITE3" ]; then
    echo "skip dist_aarch64_fills: no arm64 sqlite3 at $ARM64_SQLITE3 (bash .ci/install-cross)"
  elif [ "$can_hide" = 1 ]; then
    a=$tmp/x/bertfill-$version-linux-aarch64
    (cd "$tmp" && hidden env -u BERTFILL_MODEL BERTFILL_WARM_UP=0 OPENBLAS_NUM_THREADS=1 BERTFILL_SHARED_LINGER_MS=0 \
       timeout -k 5 300 qemu-aarch64-static -L /usr/aarch64-linux-gnu "$ARM64_SQLITE3" -batch -cmd ".load $a/bertfill" :memory: \
       <"$tmp/fill.sql" >"$tmp/arm64.out" 2>&1)
    same=$(paste -d' ' "$tmp/arm64.out" "$tmp/dev_portable.out" | awk -v n="$(wc -l <"$tmp/dev_portable.out")" '
      NF == 4 && $1 == $3 && ($2 - $4 < 1e-3) && ($4 - $2 < 1e-3) { ok++ } END { print (n > 0 && ok == n && NR == n) ? 1 : 0 }')
    check aarch64_hidden_fills "$same" \
      "arm64 under qemu: $(tr '\n' '|' <"$tmp/arm64.out"); x86-64 portable: $(tr '\n' '|' <"$tmp/dev_portable.out")"
  fi
fi
exit 0
