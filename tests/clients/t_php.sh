#!/usr/bin/env bash
# t_php.sh — bertfill from PHP's SQLite3 class (Debian: php-cli php-sqlite3),
# as docs/clients.md shows it: php -d sqlite3.extension_dir=DIR and
# $db->loadExtension('bertfill.so'), with the shipped model.  The statements
# below run through PHP (tests/clients/php/run.php) and through the sqlite3 shell in
# the same run, and must print the same rows and the same error messages
# (scores as printf('%!.17g'), all their digits); PHP gets scores as floats
# equal to the shell's; a prepared statement with a bound text; and what the
# page says about errors in PHP and about loading: the file name needs its
# .so, nothing loads without sqlite3.extension_dir nor through a symbolic
# link to it, PDO has no loadExtension before PHP 8.4.  Skipped with the
# reason without php or its SQLite3 class.
set -u
cd "$(dirname "$0")/../.."
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if ! command -v php >/dev/null; then echo "skip php: no php (Debian: make test-deps, or apt-get install php-cli php-sqlite3)"; exit 0; fi
if ! php -r 'exit(class_exists("SQLite3") ? 0 : 1);' 2>/dev/null; then
  echo "skip php: PHP has no SQLite3 class (Debian: apt-get install php-sqlite3)"; exit 0
fi
if ! command -v sqlite3 >/dev/null; then echo "skip php: no sqlite3 shell to compare with"; exit 0; fi
if [ ! -f "$EXT.so" ]; then echo "FAIL php: $EXT.so not built"; exit 1; fi
# sqlite3.extension_dir: its real path (PHP loads only files whose real path
# starts with it)
dir=$(cd "$(dirname "$EXT")" && pwd -P); so=$(basename "$EXT").so
unset BERTFILL_MODEL
export BERTFILL_PROGRESS=0
[ -n "${BF_PRELOAD:-}" ] && export LD_PRELOAD=$BF_PRELOAD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
ok() { echo "ok php.$1"; }
fail() { echo "FAIL php.$1: $2"; status=1; }
check() { if [ "$2" == "$3" ]; then ok "$1"; else fail "$1" "got [$2], want [$3]"; fi; }
php_ext() { php -d sqlite3.extension_dir="$dir" "$@" 2>&1; }

# NAME<TAB>statement; names starting with "setup" print nothing and are not compared.
T='这家酒[MASK]的价格是多少？'
cat >"$tmp/statements" <<SQL
fill	SELECT bert_fill('$T'), bert_fill('中华人民共[MASK]国宪[MASK]'), bert_fill('JAVA 的作者是谁？请自我[MASK]绍一下。')
candidates	SELECT mask, rank, token, token_id, printf('%!.17g', score), sequence FROM fill_candidates('$T', 5)
two_masks	SELECT mask, rank, token, printf('%!.17g', score) FROM fill_candidates('我想找一家餐[MASK]吃[MASK]。', 3)
sequences	SELECT rank, fill, tokens, printf('%!.17g', score), sequence FROM fill_sequences('中华人民[MASK][MASK]国', 3)
joint	SELECT bert_fill('中华人民[MASK][MASK]国', 'joint'), printf('%!.17g', bert_score('中华人民[MASK][MASK]国', '共和'))
tokenize	SELECT bert_tokenize('Java 2026 人民法[MASK]')
model	SELECT bert_load(NULL)
nulls	SELECT bert_fill(NULL) IS NULL, (SELECT count(*) FROM fill_candidates(NULL)), bert_fill('没有空')
setup_table	CREATE TABLE notes(text TEXT)
setup_rows	INSERT INTO notes VALUES ('全心全意为人民服[MASK]'), ('中华人民共[MASK]国'), (x'ff'), (NULL)
rows	SELECT key, filled, masks, error FROM fill_rows('SELECT rowid, text FROM notes')
error_k	SELECT * FROM fill_candidates('人民法[MASK]', 0)
error_mode	SELECT bert_fill('人民法[MASK]', 'best')
error_utf8	SELECT bert_fill(CAST(x'e4bd' AS TEXT))
error_long	SELECT bert_fill(printf('%.*c[MASK]', 130, '我'))
SQL

# PHP: NAME<TAB>row lines.
php_ext tests/clients/php/run.php "$so" "$tmp/statements" >"$tmp/php.out"
[ $? -eq 0 ] || fail "run" "tests/clients/php/run.php failed: $(tail -n 3 "$tmp/php.out")"
# The shell: the same statements, "@@NAME" before each, errors as the
# interactive shell shows them; then NAME<TAB>line as above.
awk -F'\t' '{ print ".print @@" $1; print $2 ";" }' "$tmp/statements" |
  stdbuf -oL -eL sqlite3 -batch -cmd ".load $EXT" :memory: 2>&1 |
  awk '/^@@/ { name = substr($0, 3); next }
       { sub(/^(Runtime|Parse) error near line [0-9]+: /, "error: "); print name "\t" $0 }' >"$tmp/shell.out"
while IFS=$'\t' read -r name _; do
  case "$name" in setup*) continue ;; esac
  want=$(grep -P "^\Q$name\E\t" "$tmp/shell.out" | cut -f2-)
  got=$(grep -P "^\Q$name\E\t" "$tmp/php.out" | cut -f2-)
  if [ -z "$want" ]; then fail "$name" "the sqlite3 shell printed nothing"; continue; fi
  check "$name" "$got" "$want"
done <"$tmp/statements"

# Scores reach PHP as floats, bit for bit the shell's (its 17 digits).
want=$(sqlite3 -cmd ".load $EXT" :memory: "SELECT printf('%!.17g', score) FROM fill_candidates('$T', 3)")
got=$(php_ext -r '$db = new SQLite3(":memory:"); $db->loadExtension($argv[1]);
  $r = $db->query("SELECT score FROM fill_candidates(\"'"$T"'\", 3)");
  for ($i = 2; $x = $r->fetchArray(SQLITE3_NUM); $i++)
    echo is_float($x[0]) && $x[0] === (float)($argv[$i] ?? "") ? $argv[$i] : var_export($x[0], true), "\n";' \
  "$so" $want)
check "float_scores" "$got" "$want"

# A prepared statement, one bound text after the other.
texts=('今天天气真[MASK]啊' '请问你叫什么名[MASK]？' '我喜欢听音[MASK]。')
want=$(for t in "${texts[@]}"; do sqlite3 -cmd ".load $EXT" :memory: "SELECT bert_fill('$t')"; done)
got=$(php_ext -r '$db = new SQLite3(":memory:"); $db->loadExtension($argv[1]);
  $st = $db->prepare("SELECT bert_fill(:text)");
  foreach (array_slice($argv, 2) as $t) { $st->bindValue(":text", $t); echo $st->execute()->fetchArray()[0], "\n"; }' \
  "$so" "${texts[@]}")
check "bound_texts" "$got" "$want"

# What docs/clients.md says about errors: an exception with bertfill's message
# (PHP's "Unable to execute statement: " before it when rows are read);
# without exceptions a warning and false.  And fetchArray() on the result of
# an INSERT runs it again.
got=$(php_ext -r '$db = new SQLite3(":memory:"); $db->loadExtension($argv[1]); $db->enableExceptions(true);
  try { $db->query("SELECT * FROM fill_candidates(\"人民法[MASK]\", 0)")->fetchArray(); }
  catch (Exception $e) { echo get_class($e), ": ", $e->getMessage(), "\n"; }
  $db->enableExceptions(false);
  var_dump($db->querySingle("SELECT bert_fill(\"人民法[MASK]\", \"best\")"));
  $db->exec("CREATE TABLE t(x)"); $db->query("INSERT INTO t VALUES (1)")->fetchArray();
  echo $db->querySingle("SELECT count(*) FROM t"), "\n";' "$so")
check "php_errors" "$got" "Exception: Unable to execute statement: fill_candidates: k must be an integer from 1 to 1000 (got 0)
PHP Warning:  SQLite3::querySingle(): Unable to execute statement: bert_fill: the second argument must be 'joint' (got 'best'); bert_fill(text) fills each [MASK] on its own in Command line code on line 5
bool(false)
2"

# What docs/clients.md says about loading.
got=$(php_ext -r '$db = new SQLite3(":memory:"); var_dump($db->loadExtension(substr($argv[1], 0, -3)));' "$so")
check "needs_so" "$(echo "$got" | tail -n1)" "bool(false)"
got=$(php -r '$db = new SQLite3(":memory:"); var_dump($db->loadExtension($argv[1]));' "$so" 2>&1)
check "needs_extension_dir" "$got" "PHP Warning:  SQLite3::loadExtension(): SQLite Extension are disabled in Command line code on line 1
bool(false)"
ln -s "$dir" "$tmp/link"
got=$(php -d sqlite3.extension_dir="$tmp/link" -r '$db = new SQLite3(":memory:"); var_dump($db->loadExtension($argv[1]));' "$so" 2>&1)
check "needs_real_path" "$got" "PHP Warning:  SQLite3::loadExtension(): Unable to open extensions outside the defined directory in Command line code on line 1
bool(false)"
got=$(php -r 'echo PHP_VERSION_ID >= 80400 ? "8.4" : (method_exists("PDO", "loadExtension") || class_exists("Pdo\\Sqlite") ? "has" : "none");')
if [ "$got" = 8.4 ]; then echo "skip php.pdo_cannot_load: PHP 8.4 or later (Pdo\\Sqlite::loadExtension)"
else check "pdo_cannot_load" "$got" "none"; fi
exit $status
