#!/usr/bin/env bash
# LangGraph's own SqliteStore tests against memlane's MemlaneStore, with only the import swapped.
# Usage: scripts/langgraph-suite.sh LANGGRAPH_CHECKOUT [pytest args...]
# Nothing of LangGraph is copied into this repository: the files are read from the checkout into a scratch folder.
set -euo pipefail
checkout=${1:?usage: scripts/langgraph-suite.sh LANGGRAPH_CHECKOUT [pytest args...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
python="$here/.venv/bin/python"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for name in test_store.py test_ttl.py; do
  sed -e 's/^from langgraph\.store\.sqlite import SqliteStore$/from memlane.langgraph import MemlaneStore as SqliteStore/' \
      -e 's/^from langgraph\.store\.sqlite\.aio import AsyncSqliteStore$/from memlane.langgraph import AsyncMemlaneStore as AsyncSqliteStore/' \
      "$checkout/libs/checkpoint-sqlite/tests/$name" > "$scratch/$name"
  grep -q '^from memlane.langgraph import' "$scratch/$name" || { echo "$name: the import to swap was not found" >&2; exit 1; }
done
# LangGraph's tests use pytest-asyncio; it goes to the scratch folder, not into memlane's environment
"$python" -m pip install --quiet --no-deps --target "$scratch/deps" pytest-asyncio
cd "$scratch"
PYTHONPATH="$scratch/deps" "$python" -m pytest -q -p no:cacheprovider -p no:randomly -p asyncio \
  test_store.py test_ttl.py "$@"
