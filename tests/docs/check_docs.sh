#!/usr/bin/env bash
# check_docs.sh - every FRAGPOOL_CONF key that `fragpool config` lists is
# documented in docs/config.md, and every `fragpool` command in the usage
# is in the README.  Usage: check_docs.sh FRAGPOOL_BIN SOURCE_DIR
set -u
bin=$1 src=$2 bad=0
for key in $("$bin" config | awk 'NF && $1 !~ /^ / && $2 == "default" {print $1}'); do
  grep -q "| \`$key\` |" "$src/docs/config.md" || { echo "docs/config.md lacks key $key"; bad=1; }
done
for cmd in demo run replay tune report merge config snapshot; do
  grep -q "fragpool $cmd" "$src/README.md" || { echo "README.md lacks 'fragpool $cmd'"; bad=1; }
done
exit $bad
