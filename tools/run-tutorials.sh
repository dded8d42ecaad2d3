#!/bin/sh
# `make test`'s last step: run every tutorial's ```sh blocks and compare
# their output with the ```text blocks that follow them.
#   sh tools/run-tutorials.sh BUILD
# The conventions are in tools/run_tutorials.py.
exec "${PYTHON:-python3}" "$(dirname "$0")/run_tutorials.py" "${1:-build}"
