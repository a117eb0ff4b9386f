<?php
// tests/clients/php/run.php — runs SQL statements through PHP's SQLite3 class with
// bertfill loaded, for tests/clients/t_php.sh:
//
//   php -d sqlite3.extension_dir=DIR tests/clients/php/run.php FILE.so STATEMENTS
//
// FILE.so is the extension's file name in DIR.  STATEMENTS has one statement
// a line, "NAME<TAB>SQL".  Prints, for each, "NAME<TAB>ROW" for every row, as
// the sqlite3 shell's list mode does (columns joined by "|", NULL empty), or
// "NAME<TAB>error: MESSAGE" when the statement fails: SQLite3 throws with the
// extension's message (enableExceptions), to which PHP adds "Unable to
// execute statement: " when the error comes from a step, taken off here.
$db = new SQLite3(':memory:');
if (!$db->loadExtension($argv[1])) exit(1);
$db->enableExceptions(true);
foreach (file($argv[2], FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) as $line) {
  [$name, $sql] = explode("\t", $line, 2);
  try {
    $res = $db->query($sql);
    // (fetchArray on the result of a statement without columns, an INSERT,
    // would run it again)
    while ($res->numColumns() > 0 && ($row = $res->fetchArray(SQLITE3_NUM))) {
      echo $name, "\t", implode('|', array_map(fn($v) => $v === null ? '' : (string)$v, $row)), "\n";
    }
  } catch (Exception $e) {
    echo $name, "\terror: ", preg_replace('/^Unable to execute statement: /', '', $e->getMessage()), "\n";
  }
}
