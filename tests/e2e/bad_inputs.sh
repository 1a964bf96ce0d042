#!/usr/bin/env bash
# End-to-end: the table of bad inputs (tests/e2e/lib/bad_inputs.py): each must
# exit 2 (configuration) or 3 (data) with a message naming the value and the
# fix, never a signal or an abort, and leave every file the user had unchanged.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 3 300 "the county jury said the election was conducted with a fair and honest vote in the city"
/usr/bin/python3 "$SRC/tests/e2e/lib/bad_inputs.py" "$BRAID" "$tmp" || fail "bad inputs"
