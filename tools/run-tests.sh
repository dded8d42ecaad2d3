#!/bin/sh
# Run every C test binary given; print each one's cmocka output and a closing
# tally line. Exit non-zero if any binary failed.
build="$1"; shift
pass=0; fail=0; failed=""
for t in "$@"; do
  out=$(TPK_BUILD="$build" "$t" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^\[  (PASSED|FAILED)|^\[  ERROR|^\[  FAILED  \] ' | sed "s|^|$(basename "$t"): |"
  n_pass=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
  n_fail=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
  pass=$((pass + ${n_pass:-0})); fail=$((fail + ${n_fail:-0}))
  if [ $rc -ne 0 ]; then
    [ -z "$n_fail" ] && fail=$((fail + 1))
    failed="$failed $(basename "$t")"
    printf '%s\n' "$out" | tail -n 40
  fi
done
echo "C tests: $pass passed, $fail failed"
[ -z "$failed" ] || { echo "failing:$failed"; exit 1; }
