#!/usr/bin/env bash
# Time `make quickstart` on a fresh clone of this repo (venv creation and install included).
#   bash bench/clone/fresh_quickstart.sh [DIR]
# Run it alone on the machine: two runs at once on 2 cores take ~3x longer each.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # usage: the comment above
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-/tmp/satseq_fresh_clone}"
rm -rf "$dir"
git clone -q "$src" "$dir"
cd "$dir"
start=$(date +%s)
make quickstart
echo "fresh-clone make quickstart: $(( $(date +%s) - start )) s wall (details: $dir/outputs/quickstart/results.json)"
