#!/usr/bin/env bash
# Time the README's test command on a fresh clone of this repo, installs included, as a newcomer runs it.
#   bash bench/clone/fresh_test.sh [DIR]        (DIR/main is the clone, DIR/shared links to ../shared)
# Run it alone on the machine. Prints the wall time of the installs, of the tests, and of `make test` in all;
# each pytest run prints its own time and its 15 slowest tests.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # usage: the comment above
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-/tmp/satseq_fresh_test}"
rm -rf "$dir" && mkdir -p "$dir"
git clone -q "$src" "$dir/main"
[ -e "$src/../shared" ] && ln -s "$(cd "$src/../shared" && pwd)" "$dir/shared"
cd "$dir/main"
start=$(date +%s)
make test
end=$(date +%s)
echo "fresh-clone make test: $(( end - start )) s wall on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
