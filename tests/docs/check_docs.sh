#!/usr/bin/env bash
# check_docs.sh - every FRAGPOOL_CONF key that `fragpool config` lists is
# documented in docs/config.md, with the segments it acts in as `fragpool
# config` says; every `fragpool` command in the usage is in the README's
# command table with its usage line as `fragpool CMD --help` prints it.
# Usage: check_docs.sh FRAGPOOL_BIN SOURCE_DIR
set -u
bin=$1 src=$2 bad=0
for key in $("$bin" config | awk 'NF && $1 !~ /^ / && $2 == "default" {print $1}'); do
  grep -q "| \`$key\` |" "$src/docs/config.md" || { echo "docs/config.md lacks key $key"; bad=1; }
done
# The table "Which segments each key acts in" agrees with `fragpool config`.
"$bin" config | awk '$1 !~ /^ / && $2 == "default" {key=$1} /acts with classic segments only/ {print key, "classic"} /acts with virtual-memory segments only/ {print key, "vmm"}' >"${TMPDIR:-/tmp}/fp-acts.$$"
for key in $("$bin" config | awk 'NF && $1 !~ /^ / && $2 == "default" {print $1}'); do
  want="| acts | acts |"
  mode=$(awk -v k="$key" '$1 == k {print $2}' "${TMPDIR:-/tmp}/fp-acts.$$")
  [ "$mode" = classic ] && want="| acts | no effect |"
  [ "$mode" = classic ] && [ "$key" = garbage_collection_threshold ] && want="| acts (under a cap) | no effect |"
  [ "$mode" = vmm ] && want="| no effect | acts |"
  [ "$key" = expandable_segments ] && want="| chooses | chooses |"
  [ "$key" = defer_headroom_mb ] && want="| no effect | no effect |"
  grep -qF "| \`$key\` $want" "$src/docs/config.md" || { echo "docs/config.md: the acts table's row of $key is not '$want'"; bad=1; }
done
rm -f "${TMPDIR:-/tmp}/fp-acts.$$"
for cmd in demo run replay tune report merge config snapshot; do
  grep -q "fragpool $cmd" "$src/README.md" || { echo "README.md lacks 'fragpool $cmd'"; bad=1; }
  # the command table's first column is the usage line, every option in it
  usage=$("$bin" "$cmd" --help | sed -n '1s/^usage: //p' | sed 's/|/\\|/g')
  grep -qF "| \`$usage\` |" "$src/README.md" || { echo "README.md's command table lacks '$usage'"; bad=1; }
done
exit $bad
