#!/usr/bin/env bash
# packaging/tarball.sh — one release tarball of `make dist` (docs/dist.md):
#   packaging/tarball.sh VERSION ARCH SO OUTDIR MODEL_FILE...
# stages bertfill-VERSION-linux-ARCH/ with
#   bertfill.so                    SO (built by make dist: utf8proc linked in)
#   model/bertfill-zh-tiny/        MODEL_FILE... (the shipped model, its licences
#                                  inside) and model/MODEL_CARD.md
#   LICENSE, licenses/utf8proc     bertfill's licence; utf8proc's (linked in),
#                                  Debian's copyright file of libutf8proc-dev
#   licenses/unicode               the Unicode License of the Unihan data in
#                                  bertfill.so's confusion table (ext/engine/LICENSE-Unicode.txt)
#   README                         what this is and two lines of use
#   BUILDINFO                      version, architecture, the highest GLIBC_x.y
#                                  the .so needs (read from it: what a
#                                  manylinux_x_y tag may claim), its NEEDED,
#                                  the compiler, the commit
#   SHA256SUMS                     of every file above (sha256sum -c)
# and writes OUTDIR/bertfill-VERSION-linux-ARCH.tar.gz (files sorted, owner
# root, times of the last commit: the same input gives the same bytes).
# Refuses a .so that needs more than the C library, or that exports more
# than the entry points: the release promise is checked where it is made
# (tests/dist/t_dist.sh checks the tarball again).
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 VERSION ARCH SO OUTDIR MODEL_FILE..." >&2; exit 2; }
version=$1 arch=$2 so=$3 out=$4; shift 4
name=bertfill-$version-linux-$arch
die() { echo "make dist: $name: $*" >&2; exit 1; }

needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | LC_ALL=C sort | tr '\n' ' ')
for lib in $needed; do
  case "$lib" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|ld-linux*) ;;
    *) die "$so needs $lib: the release file may need only the C library" ;;
  esac
done
exports=$(nm -D --defined-only "$so" | awk '{print $3}' | LC_ALL=C sort | tr '\n' ' ')
[ "$exports" = "sqlite3_bertfill_init sqlite3_bertfill_trusted_init " ] ||
  die "$so exports more than its entry points: $exports"
glibc=$(readelf -V --wide "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
[ -n "$glibc" ] || die "no GLIBC version needs read from $so"

stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
d=$stage/$name
mkdir -p "$d/model/bertfill-zh-tiny" "$d/licenses"
install -m 0755 "$so" "$d/bertfill.so"
install -m 0644 "$@" "$d/model/bertfill-zh-tiny/"
install -m 0644 model/MODEL_CARD.md "$d/model/MODEL_CARD.md"
install -m 0644 LICENSE "$d/LICENSE"
install -m 0644 /usr/share/doc/libutf8proc-dev/copyright "$d/licenses/utf8proc"
install -m 0644 ext/engine/LICENSE-Unicode.txt "$d/licenses/unicode"
cat >"$d/README" <<EOT
bertfill $version for Linux $arch: a SQLite extension that fills [MASK] blanks of
Chinese text with a BERT masked language model, inside the database process.

  sqlite3 -cmd '.load ./bertfill' :memory: "SELECT bert_fill('中华人民共[MASK]国');"
  Python: conn.enable_load_extension(True); conn.load_extension('./bertfill')

bertfill.so needs only the C library (glibc $glibc or newer, see BUILDINFO): utf8proc
is linked in (licenses/utf8proc); OpenBLAS is used when installed, else not needed.
Its spelling confusion table is derived from Unicode's Unihan data (licenses/unicode).
It finds the model in model/bertfill-zh-tiny next to it (model/MODEL_CARD.md);
keep the two together, or set BERTFILL_MODEL / SELECT bert_load('dir').
Documentation: README.md and docs/ in the bertfill sources (docs/dist.md: these files).
SHA256SUMS: sha256sum -c SHA256SUMS
EOT
{
  echo "name=bertfill"
  echo "version=$version"
  echo "arch=$arch"
  echo "glibc=$glibc"
  echo "manylinux=manylinux_${glibc/./_}_$arch"
  echo "needed=${needed% }"
  echo "exports=${exports% }"
  echo "compiler=$(${CC:-cc} --version | head -1)"
  echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
} >"$d/BUILDINFO"
(cd "$d" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort |
   xargs sha256sum >SHA256SUMS)
mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
mkdir -p "$out"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -C "$stage" -cf - "$name" |
  gzip -n -9 >"$out/$name.tar.gz.tmp"
mv "$out/$name.tar.gz.tmp" "$out/$name.tar.gz"
echo "make dist: $out/$name.tar.gz (glibc $glibc; needs ${needed% })"
