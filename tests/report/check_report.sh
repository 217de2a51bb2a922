#!/bin/sh
# check_report.sh - the HTML report in a real browser (headless chromium).
#
# usage: check_report.sh FRAGPOOL TRACE WORKDIR [--screenshot PNG]
#
# Writes WORKDIR/report.html from TRACE, loads it in headless chromium and
# checks the DOM the page's own script built: #fp-status reads "ok" (the
# script sets it only after every part rendered), #fp-errors is empty
# (window.onerror writes there), the timeline has both series, the segment
# map has one row per segment of the replay, the histograms have bars and
# the summary table is there.  The browser's own log must show no uncaught
# error and no Content-Security-Policy refusal (the page may fetch
# nothing).  Then the same for a page built from a JSON summary, and a
# negative control: a copy of the page with an injected error must fail
# the same checks.  The page leads with the finding (fragmentation at peak
# and tune's verdict).  The default (virtual-memory segments) draws each
# range's pages; the classic pool's page does not.  With --screenshot,
# also writes a PNG of the page.
#
# Exit: 0 pass, 1 fail, 77 skip (no chromium; ctest SKIP_RETURN_CODE).
set -eu

if [ $# -lt 3 ]; then
    echo "usage: $0 FRAGPOOL TRACE WORKDIR [--screenshot PNG]" >&2
    exit 2
fi
FRAGPOOL=$1 TRACE=$2 WORK=$3
shift 3
SHOT=
if [ "${1:-}" = "--screenshot" ] && [ -n "${2:-}" ]; then SHOT=$2; fi

CHROMIUM=
for c in chromium chromium-browser google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
done
if [ -z "$CHROMIUM" ]; then
    echo "SKIP: chromium not found (apt-get install -y chromium)"
    exit 77
fi

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok:   $*"; }

# browse PAGE DOM LOG: the DOM after load, and the browser's log.
browse() {
    rm -rf "$WORK/profile"
    timeout 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$WORK/profile" --enable-logging=stderr --v=0 \
        --dump-dom "file://$1" >"$2" 2>"$3" || true
}

count() { grep -o "$1" "$2" | wc -l | tr -d ' '; }

# common_checks NAME DOM LOG: the page loaded and its script finished cleanly.
common_checks() {
    if grep -q 'id="fp-status"[^>]*>ok</div>' "$2"; then pass "$1: status ok"
    else fail "$1: #fp-status is not ok: $(grep -o '<div id="fp-status"[^<]*' "$2" || echo missing)"; fi
    if grep -q '<div id="fp-errors" hidden="">\(</div>\)' "$2"; then pass "$1: no script errors"
    else fail "$1: script errors: $(grep -o '<div id="fp-errors"[^<]*' "$2" || echo 'no #fp-errors')"; fi
    if grep -qi 'Uncaught\|Content.Security.Policy\|SyntaxError' "$3"; then
        fail "$1: the browser logged: $(grep -i 'Uncaught\|Content.Security.Policy\|SyntaxError' "$3" | head -3)"
    else pass "$1: no errors in the browser log"; fi
    if grep -q 'id="summary-tbl"' "$2" && grep -q 'GPU reserved memory' "$2"; then
        pass "$1: summary table"
    else fail "$1: no summary table"; fi
}

# 1. A report of the trace.
"$FRAGPOOL" report "$TRACE" -o "$WORK/report.html" >"$WORK/report.out"
"$FRAGPOOL" replay "$TRACE" --json >"$WORK/summary.json"
# Without a budget nothing is released, so at peak reserved every segment
# of the run is held: the map has the run's peak segment count of rows.
want=$(grep -o '"segments":{"current":[0-9]*,"peak":[0-9]*' "$WORK/summary.json" | head -1 |
       sed 's/.*"peak"://')
browse "$WORK/report.html" "$WORK/report.dom" "$WORK/report.log"
common_checks report "$WORK/report.dom" "$WORK/report.log"
for s in allocated reserved; do
    if grep -q "<polyline points=\"[^\"]*\" class=\"series $s\"" "$WORK/report.dom"; then
        pass "timeline: $s series"
    else fail "timeline: no $s series"; fi
done
rows=$(count 'class="seg-row"' "$WORK/report.dom")
if [ -n "$want" ] && [ "$rows" = "$want" ]; then pass "segment map: $rows rows"
else fail "segment map: $rows rows, want ${want:-?}"; fi
used=$(count 'class="blk st1"' "$WORK/report.dom")
free=$(count 'class="blk st0"' "$WORK/report.dom")
if [ "$used" -gt 0 ] && [ "$free" -gt 0 ]; then pass "segment map: $used allocated, $free free blocks"
else fail "segment map: $used allocated, $free free blocks"; fi
bars=$(count 'class="bar count"' "$WORK/report.dom")
bbars=$(count 'class="bar bytes"' "$WORK/report.dom")
if [ "$bars" -ge 10 ] && [ "$bars" = "$bbars" ]; then pass "histogram: $bars size classes"
else fail "histogram: $bars count bars, $bbars byte bars"; fi

# The page leads with the finding: fragmentation and tune's verdict.
if grep -q '<div class="finding" id="finding">Fragmentation at peak: [0-9.]*% (peak reserved' "$WORK/report.dom" &&
   grep -q '^verdict: ' "$WORK/report.dom"; then pass "finding: fragmentation and the verdict"
else fail "finding: no fragmentation line or verdict at the top"; fi

# Virtual-memory segments (the default): one row of pages per range,
# mapped runs drawn; the classic pool's page has no such rows.
ranges=$(grep -o 'data-ranges="[0-9]*"' "$WORK/report.dom" | sed 's/[^0-9]//g')
rrows=$(count 'class="range-row"' "$WORK/report.dom")
mruns=$(count 'class="run mapped"' "$WORK/report.dom")
if [ "${ranges:-0}" -gt 0 ] && [ "$rrows" = "$ranges" ] && [ "$mruns" -gt 0 ]; then
    pass "pages: $rrows ranges, $mruns mapped runs"
else fail "pages: $rrows range rows for ${ranges:-?} ranges, $mruns mapped runs"; fi
"$FRAGPOOL" report "$TRACE" --conf expandable_segments:False -o "$WORK/classic.html" >/dev/null
browse "$WORK/classic.html" "$WORK/classic.dom" "$WORK/classic.log"
common_checks classic "$WORK/classic.dom" "$WORK/classic.log"
if [ "$(count 'class="range-row"' "$WORK/classic.dom")" = 0 ] &&
   [ "$(count 'class="seg-row"' "$WORK/classic.dom")" -gt 2 ]; then
    pass "classic: segments, no pages"
else fail "classic: $(count 'class="range-row"' "$WORK/classic.dom") range rows"; fi

# 2. A report of a JSON summary: the table, and no trace-only parts.
"$FRAGPOOL" report "$WORK/summary.json" -o "$WORK/summary.html" >/dev/null
browse "$WORK/summary.html" "$WORK/summary.dom" "$WORK/summary.log"
common_checks summary "$WORK/summary.dom" "$WORK/summary.log"
if [ "$(count 'class="seg-row"' "$WORK/summary.dom")" = 0 ]; then pass "summary: no segment map"
else fail "summary: a segment map from nowhere"; fi
if grep -q '<div class="finding" id="finding" hidden="">' "$WORK/summary.dom"; then pass "summary: no finding"
else fail "summary: a finding shown without a trace"; fi

# A shim's summary with a lending object (docs/lending.md) shows it.
sed 's|"devices":\[{|"devices":[{"lending":{"asks":2,"asks_served":1,"borrowed_bytes":536870912,"wait_us":4000,"unanswered":1,"answers":3,"lent_bytes":1048576,"refused":0},|' \
    "$WORK/summary.json" >"$WORK/lend.json"
"$FRAGPOOL" report "$WORK/lend.json" -o "$WORK/lend.html" >/dev/null
browse "$WORK/lend.html" "$WORK/lend.dom" "$WORK/lend.log"
common_checks lending "$WORK/lend.dom" "$WORK/lend.log"
if grep -q 'id="lend-tbl-0"' "$WORK/lend.dom" && grep -q '512.00 MiB in 4 ms of waiting' "$WORK/lend.dom"; then
    pass "lending: the table"
else fail "lending: no lending table ($(grep -o 'Given back by peers[^<]*<[^<]*<[^<]*' "$WORK/lend.dom" || echo none))"; fi
if grep -q 'id="lend-tbl-0"' "$WORK/summary.dom"; then fail "lending: a table without lending"
else pass "lending: none where the summary has none"; fi

# 3. Negative control: the checks must catch a script error.
sed 's|drawSummary(sum);|drawSummary(sum); null.boom();|' "$WORK/report.html" >"$WORK/broken.html"
browse "$WORK/broken.html" "$WORK/broken.dom" "$WORK/broken.log"
if grep -q 'id="fp-status"[^>]*>ok<' "$WORK/broken.dom" ||
   ! grep -q '<div id="fp-errors">script error' "$WORK/broken.dom"; then
    fail "control: an injected error went unnoticed"
else pass "control: an injected error is caught"; fi

if [ -n "$SHOT" ]; then
    rm -rf "$WORK/profile"
    timeout 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$WORK/profile" --hide-scrollbars --window-size=1060,2020 \
        --screenshot="$SHOT" "file://$WORK/report.html" >/dev/null 2>&1 || fail "screenshot"
    [ -s "$SHOT" ] && pass "screenshot: $SHOT"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed; pages and browser logs in $WORK"
    exit 1
fi
echo "all checks passed"
