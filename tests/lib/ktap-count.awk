# SPDX-License-Identifier: GPL-2.0
#
# Count the test cases of one KTAP document (a test script's own output): its unindented
# "ok"/"not ok" lines, "# SKIP" directives counted as skipped. Nested (indented) results are
# not counted. Prints "passed failed skipped plan" (plan 0 when the document had none).
#
#   awk -f ktap-count.awk FILE
{ sub(/\r$/, "") }
/^1\.\.[0-9]+/ { plan = substr($1, 4) + 0; next }
/^(not )?ok [0-9]+/ {
	if ($0 ~ /^ok / && $0 ~ /#[ \t]*[Ss][Kk][Ii][Pp]/) skipped++
	else if ($0 ~ /^ok /) passed++
	else failed++
}
END { printf "%d %d %d %d\n", passed, failed, skipped, plan }
