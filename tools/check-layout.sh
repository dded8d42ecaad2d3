#!/bin/sh
# Data flows one way: each folder includes only the folders before it in the
# pipeline (architecture.md). The language frontend (dsl/) is seen by the
# runtime in one file, runtime/load.c, where a program's text is checked once;
# nothing that specialises, tunes, times or runs a kernel includes it.
# Prints each include that breaks the rule; exits 1 if there is one.
cd "$(dirname "$0")/.."
allowed() { # FOLDER -> the folders its files may include
  case "$1" in
  base) echo "base" ;;
  ir) echo "base ir" ;;
  dsl) echo "base ir dsl" ;;
  lower) echo "base ir lower" ;;
  host) echo "base ir lower host" ;;
  interp) echo "base ir interp" ;;
  sim) echo "base ir lower sim" ;;
  runtime) echo "base ir lower host interp sim runtime" ;;
  esac
}
bad=0
for dir in base ir dsl lower host interp sim runtime; do
  ok=$(allowed "$dir")
  for f in "$dir"/*.c "$dir"/*.h; do
    [ -e "$f" ] || continue
    for inc in $(sed -n 's/^#include "\([a-z_]*\)\/.*/\1/p' "$f" | sort -u); do
      case " $ok " in *" $inc "*) continue ;; esac
      [ "$f" = runtime/load.c ] && [ "$inc" = dsl ] && continue
      echo "layout: $f includes $inc/, which $dir/ must not see"
      bad=1
    done
  done
done
[ $bad = 0 ] && echo "layout: every folder includes only the stages before it"
exit $bad
