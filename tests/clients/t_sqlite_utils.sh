#!/usr/bin/env bash
# t_sqlite_utils.sh — bertfill from Debian's sqlite-utils (apt-get install
# sqlite-utils; make test-deps does): `sqlite-utils query DB SQL
# --load-extension ./bertfill` with bert_fill and fill_candidates, an error, and
# a column fill with bert_prefill + UPDATE.  Answers are compared with the
# sqlite3 shell's for the same model (cache off there, so it computes its own).
# --load-extension takes a path with a slash (./bertfill or /abs/bertfill, .so
# optional); a bare name is looked up in the system library path instead.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if ! command -v sqlite-utils >/dev/null; then
  echo "skip sqlite_utils: no sqlite-utils (Debian: make test-deps, or apt-get install sqlite-utils)"; exit 0
fi
if ! command -v sqlite3 >/dev/null; then echo "skip sqlite_utils: no sqlite3 shell to compare with"; exit 0; fi
if [ ! -f "$BUILD/models/tiny/config.json" ]; then echo "FAIL sqlite_utils: no test models in $BUILD/models (make models)"; exit 1; fi
BERTFILL_MODEL=$(cd "$BUILD/models/tiny" && pwd)
export BERTFILL_MODEL
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
db=$tmp/t.db
status=0
check() {   # check NAME GOT WANT
  if [ "$2" == "$3" ]; then echo "ok sqlite_utils.$1"
  else echo "FAIL sqlite_utils.$1: got [$2], want [$3]"; status=1; fi
}
shell() { BERTFILL_CACHE=off sqlite3 -bail -cmd ".load $EXT" "$@"; }
# The relative path of the extension, as a user in the repository types it.
rel=$(realpath --relative-to="$tmp" "$EXT")
case "$rel" in /*) ;; *) rel=./$rel ;; esac

text='今天天气真[MASK]啊，适合出去玩。'
want=$(shell :memory: "select bert_fill('$text')")
got=$(cd "$tmp" && sqlite-utils query t.db "select bert_fill('$text')" --load-extension "$rel" --raw 2>&1)
check scalar "$got" "$want"
got=$(sqlite-utils memory "select bert_fill('$text')" --load-extension "$EXT.so" --raw 2>&1)
check memory_so_path "$got" "$want"

sql="select mask, rank, token, token_id, round(score, 9) as score, sequence
       from fill_candidates('根据本法的规[MASK]，自公布之日起施[MASK]。', 3)"
want=$(shell -list -separator , -header :memory: "$sql")
got=$(sqlite-utils query "$db" "$sql" --load-extension "$EXT" --csv 2>&1 | tr -d '\r')
check table_valued "$got" "$want"

got=$(sqlite-utils query "$db" "select * from fill_candidates('[MASK]', 0)" --load-extension "$EXT" 2>&1)
rc=$?
check error "$rc: $got" "1: Error: fill_candidates: k must be an integer from 1 to 1000 (got 0)"

# A column: insert, add a column, bert_prefill (batched encoder runs, results
# cached in the database), then the UPDATE reads every answer from the cache.
db=$tmp/column.db
printf '%s\n' '{"text": "今天天气真[MASK]啊，适合出去玩。"}' \
  '{"text": "学习要持之以恒，不能三天打鱼，两天[MASK]。"}' \
  '{"text": "他说话总是模棱两可，让人捉摸不[MASK]。"}' \
  '{"text": "这件事已经[MASK]木难支，无法挽回了。"}' \
  '{"text": "我们应当尊老爱[MASK]，弘扬传统美德。"}' | sqlite-utils insert "$db" sentences - --nl
sqlite-utils add-column "$db" sentences filled text
got=$(sqlite-utils query "$db" "select bert_prefill(text) from sentences" --load-extension "$EXT" --raw 2>&1)
check prefill "$got" 5
got=$(sqlite-utils query "$db" "update sentences set filled = bert_fill(text)" --load-extension "$EXT" 2>&1)
check update "$got" '[{"rows_affected": 5}]'
want=$(shell -list -separator , "$db" "select rowid, bert_fill(text) from sentences order by rowid")
got=$(sqlite-utils query "$db" "select rowid, filled from sentences order by rowid" --csv --no-headers 2>&1 | tr -d '\r')
check column_fill "$got" "$want"
got=$(sqlite-utils query "$db" "select count(*) from bertfill_cache" --raw 2>&1)
check column_cached "$got" 5
exit $status
