#!/usr/bin/env bash
# Model loading: tests/c/test_json.c (the JSON reader; with the shared
# bert-base-chinese files when ../shared/data exists) and
# tests/c/test_model_load.c on tiny generated models and broken copies of
# them (made by tests/make_broken_models.py into $BUILD/model-load/).
# C programs run under $BF_WRAP (valgrind in `make valgrind`).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
rc=0
jbin=$BUILD/tests/test_json
if [ ! -x "$jbin" ]; then echo "FAIL test_json: $jbin not built (make test-bins)"; rc=1
else
  shared=../shared/data
  if [ -d "$shared/bert-base-chinese" ]; then ${BF_WRAP:-} "$jbin" "$shared" || rc=1
  else ${BF_WRAP:-} "$jbin" || rc=1; fi
fi
bin=$BUILD/tests/test_model_load
if [ ! -x "$bin" ]; then echo "FAIL test_model_load: $bin not built (make test-bins)"; exit 1; fi
cases=$BUILD/model-load
if ! "$PYTHON" tests/make_broken_models.py "$cases" "$BUILD/models" >"$BUILD/model-load.log" 2>&1; then
  echo "FAIL make_broken_models: $(tail -n 5 "$BUILD/model-load.log" | tr '\n' ' ')"
  exit 1
fi
${BF_WRAP:-} "$bin" "$cases" || rc=1
exit $rc
