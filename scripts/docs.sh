#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Render every Documentation/**/*.rst to HTML with docutils, warnings treated as errors.
#
#   scripts/docs.sh [OUTDIR]
#
# OUTDIR (`make docs` uses out/docs) gets one .html per .rst, at the same relative path, so
# the links between the pages work. Without OUTDIR the documents are only checked (scripts/lint.sh).
# Exit status: 0 if every document rendered without a warning, 1 otherwise (each problem is
# printed as docutils reports it: file, line, level and message).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# docutils from Debian's python3-docutils (scripts/deps.sh): the system python has it, a python
# earlier in PATH (pyenv, a venv) may not.
docutils=()
for py in /usr/bin/python3 python3; do
	if "$py" -c 'import docutils' 2>/dev/null; then
		docutils=("$py" -m docutils)
		break
	fi
done
if ((${#docutils[@]} == 0)); then
	command -v rst2html5 >/dev/null || die "docutils not found: install python3-docutils (scripts/deps.sh)"
	docutils=(rst2html5)
fi

out=${1:-}
tmp=
if [ -z "$out" ]; then
	tmp=$(mktemp -d)
	out=$tmp
	trap 'rm -rf "$tmp"' EXIT
fi

cd "$repo" || exit 1
mapfile -t docs < <(find Documentation -name '*.rst' | sort)
((${#docs[@]})) || die "no .rst files under Documentation/"

failed=0
for rst in "${docs[@]}"; do
	rel=${rst#Documentation/}
	html=$out/${rel%.rst}.html
	mkdir -p "$(dirname "$html")"
	# --halt=warning: stop at the first warning (or error) and exit non-zero.
	if msg=$("${docutils[@]}" --halt=warning --report=warning --no-datestamp \
		--input-encoding=utf-8 --output-encoding=utf-8 "$rst" "$html" 2>&1); then
		[ -z "$msg" ] || echo "$msg"
		[ -n "$tmp" ] || echo "  HTML    ${html#"$repo"/}"
	else
		echo "$msg"
		echo "FAILED  $rst"
		failed=$((failed + 1))
	fi
done
if ((failed)); then
	echo "docs: $failed of ${#docs[@]} documents have warnings or errors"
	exit 1
fi
echo "docs: ${#docs[@]} documents, no warnings"
