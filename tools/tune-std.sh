#!/bin/sh
# Tune every row of the standard benchmark suite on a simulated chip and ship
# the winners in kernels/tuned.tsv (then `make` compiles them into the
# library). Usage: tools/tune-std.sh [BUILD] [DEVICE]   (default build sim:v5e)
set -e
BUILD=${1:-build}
DEVICE=${2:-sim:v5e}
"$BUILD/tpk" bench --suite std --list | awk 'NR > 2 && $1 != "" { print $1, $2, $3 }' |
while read -r kernel file shape; do
  echo "== $kernel ($shape) on $DEVICE"
  "$BUILD/tpk" tune "kernels/$file" --kernel "$kernel" --shape "$shape" --device "$DEVICE" -q --no-cache \
    --save-default kernels/tuned.tsv || echo "   (not tuned: see above)"
done
