#!/usr/bin/env bash
# Run ONCE, by the lead, after every branch is merged: formats the whole tree with ruff.
# 1. drops every `# fmt: skip` pragma (they date from before a formatter was configured),
# 2. `ruff check --fix` (import order, the other fixable lint rules), 3. `ruff format`.
# Then .ci/run's `ruff format --check` and `ruff check` pass; commit the result as one commit.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ruff >/dev/null || { echo "ruff not found: activate the venv (pip install -e '.[test]')" >&2; exit 2; }
git ls-files -z '*.py' | xargs -0 sed -i -E 's/[[:space:]]*# fmt: skip[[:space:]]*$//'
ruff check --fix --quiet . || true   # what it cannot fix is listed by the final check below
ruff format --quiet .
ruff check .
ruff format --check .
echo "formatted; review with git diff --stat and commit"
